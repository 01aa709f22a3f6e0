package inventory

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
	"github.com/certdrift/certdrift/test/certs"
)

const (
	benchSecrets    = 5000
	benchNamespaces = 50
	benchUnrelated  = 500 // Opaque, 20 KiB each: the server must filter them out
)

var benchSetup sync.Once

// createBenchSecrets creates benchSecrets kubernetes.io/tls Secrets (unique ECDSA P-256 leaves
// and keys, one shared ca.crt) across benchNamespaces namespaces, plus benchUnrelated large
// Opaque Secrets.
func createBenchSecrets(b *testing.B) {
	tb := controlPlane(b)
	admin := kubetest.FastAdmin(b, tb)
	start := time.Now()
	var nss []string
	for i := range benchNamespaces {
		nss = append(nss, fmt.Sprintf("bench-%02d", i))
	}
	kubetest.CreateNamespaces(b, admin, nss...)
	root := certs.NewCA(b, certs.WithCommonName("Bench Root"))
	jobs := make(chan *corev1.Secret, 64)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range jobs {
				if err := createQuiet(admin, s); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range benchSecrets {
		leaf := root.Leaf(b, certs.WithFreshKey(), certs.WithDNSNames(fmt.Sprintf("svc-%d.bench.example", i)))
		jobs <- kubetest.TLSSecret(nss[i%benchNamespaces], fmt.Sprintf("tls-%d", i), leaf.CertPEM, leaf.KeyPEM, root.CertPEM)
	}
	for i := range benchUnrelated {
		jobs <- &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nss[i%benchNamespaces], Name: fmt.Sprintf("blob-%d", i)},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"blob": make([]byte, 20<<10)}}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("create bench Secrets: %v", err)
	default:
	}
	b.Logf("created %d TLS and %d Opaque Secrets in %v", benchSecrets, benchUnrelated, time.Since(start).Round(time.Millisecond))
}

func createQuiet(c kubernetes.Interface, s *corev1.Secret) error {
	_, err := c.CoreV1().Secrets(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{})
	return err
}

// BenchmarkInitialSync measures a cluster-wide inventory from New to WaitSynced over the bench
// Secrets, and the heap it holds afterwards (after a GC, minus the heap before it started).
//
//	nice -n 10 go test ./probe/kube/ -run '^$' -bench InitialSync -benchtime 3x
func BenchmarkInitialSync(b *testing.B) {
	benchSetup.Do(func() { createBenchSecrets(b) })
	tb := controlPlane(b)
	var syncTotal time.Duration
	var heapTotal, peakTotal float64
	for i := 0; b.Loop(); i++ {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		peak := samplePeakHeap()
		start := time.Now()
		inv, err := New(tb.Config, Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = inv.Run(ctx) }()
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		if err := inv.WaitSynced(wctx); err != nil {
			b.Fatal(err)
		}
		wcancel()
		took := time.Since(start)
		peakHeap := peak()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		n := 0
		for _, s := range inv.Snapshot().Secrets {
			if len(s.Namespace) > 6 && s.Namespace[:6] == "bench-" {
				n++
			}
		}
		if n != benchSecrets {
			b.Fatalf("inventory holds %d bench Secrets, want %d", n, benchSecrets)
		}
		st := inv.Stats()
		if st.SecretsParsed["Opaque"] != 0 {
			b.Fatalf("%d Opaque Secrets reached the transform", st.SecretsParsed["Opaque"])
		}
		heap := float64(after.HeapInuse) - float64(before.HeapInuse)
		b.Logf("run %d: synced %d Secrets in %v (%d list pages); heap in use after sync +%.1f MiB, peak heap in use during sync +%.1f MiB",
			i, n, took.Round(time.Millisecond), st.ListRequests, heap/(1<<20), (peakHeap-float64(before.HeapInuse))/(1<<20))
		syncTotal += took
		heapTotal += heap
		peakTotal += peakHeap - float64(before.HeapInuse)
		runtime.KeepAlive(inv)
		cancel()
		<-done
	}
	b.ReportMetric(syncTotal.Seconds()/float64(b.N), "sync-s/op")
	b.ReportMetric(heapTotal/float64(b.N)/(1<<20), "heap-MiB")
	b.ReportMetric(peakTotal/float64(b.N)/(1<<20), "peak-heap-MiB")
}

// samplePeakHeap samples HeapInuse every 20ms until the returned function is called, which
// returns the highest value seen.
func samplePeakHeap() func() float64 {
	stop := make(chan struct{})
	res := make(chan float64)
	go func() {
		var peak uint64
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				res <- float64(peak)
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 { close(stop); return <-res }
}
