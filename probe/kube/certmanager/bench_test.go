package certmanager

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

// The benchmarks' cluster: CERTDRIFT_CM_BENCH_N (default 2,000) Certificates, as many
// CertificateRequests (each with an issued chain in status.certificate, which the projection
// parses) and the Certificates' TLS Secrets, in namespace benchNS, with status written through
// the status subresource as cert-manager writes it. No controller runs.
const benchNS = "cmbench"

var benchPop struct {
	once sync.Once
	n    int
	err  error
	took time.Duration
}

func benchPopulated(b *testing.B) (*testbed.Testbed, int) {
	b.Helper()
	tb := bed.Get(b)
	benchPop.once.Do(func() {
		benchPop.n = 2000
		if v := os.Getenv("CERTDRIFT_CM_BENCH_N"); v != "" {
			if benchPop.n, benchPop.err = strconv.Atoi(v); benchPop.err != nil {
				return
			}
		}
		start := time.Now()
		benchPop.err = populate(b, tb, benchPop.n)
		benchPop.took = time.Since(start)
		b.Logf("populated %d Certificates, CertificateRequests and Secrets in %v", benchPop.n, benchPop.took)
	})
	if benchPop.err != nil {
		b.Fatalf("populate: %v", benchPop.err)
	}
	return tb, benchPop.n
}

func populate(b *testing.B, tb *testbed.Testbed, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := tb.InstallCertManagerCRDs(ctx, ""); err != nil {
		return err
	}
	c := kubetest.FastAdmin(b, tb)
	kubetest.CreateNamespaces(b, c, benchNS)
	rc := rest.CopyConfig(tb.Config)
	rc.QPS, rc.Burst = 2000, 2000
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	ca := certs.NewCA(b)
	leaf := ca.Leaf(b, certs.WithDNSNames("web.example.com"))
	issued := base64.StdEncoding.EncodeToString(append(append([]byte{}, leaf.CertPEM...), ca.CertPEM...))
	notAfter := leaf.Cert.NotAfter.UTC().Format(time.RFC3339)
	ready := []any{map[string]any{"type": "Ready", "status": "True", "reason": "Ready", "message": "Certificate is up to date and has not expired",
		"lastTransitionTime": "2026-11-20T10:00:00Z"}}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := populateOne(ctx, c.CoreV1().Secrets(benchNS), dc, i, leaf.CertPEM, leaf.KeyPEM, issued, notAfter, ready); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func populateOne(ctx context.Context, secrets interface {
	Create(context.Context, *corev1.Secret, metav1.CreateOptions) (*corev1.Secret, error)
}, dc dynamic.Interface, i int, certPEM, keyPEM []byte, issued, notAfter string, ready []any) error {
	name := fmt.Sprintf("web-%05d", i)
	if _, err := secrets.Create(ctx, kubetest.TLSSecret(benchNS, name+"-tls", certPEM, keyPEM, nil), metav1.CreateOptions{}); err != nil {
		return err
	}
	cert := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": name, "namespace": benchNS},
		"spec": map[string]any{"secretName": name + "-tls", "dnsNames": []any{"web.example.com"},
			"issuerRef": map[string]any{"name": "ca", "kind": "Issuer", "group": "cert-manager.io"}}}}
	cr, err := dc.Resource(Certificates).Namespace(benchNS).Create(ctx, cert, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	cr.Object["status"] = map[string]any{"revision": int64(1), "notAfter": notAfter, "conditions": ready}
	if _, err := dc.Resource(Certificates).Namespace(benchNS).UpdateStatus(ctx, cr, metav1.UpdateOptions{}); err != nil {
		return err
	}
	req := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cert-manager.io/v1", "kind": "CertificateRequest",
		"metadata": map[string]any{"name": name + "-1", "namespace": benchNS, "annotations": map[string]any{
			kube.CertManagerCertificateNameAnnotation: name, kube.CertManagerRevisionAnnotation: "1"}},
		"spec": map[string]any{"request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K", "issuerRef": map[string]any{"name": "ca"}}}}
	rq, err := dc.Resource(CertificateRequests).Namespace(benchNS).Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	rq.Object["status"] = map[string]any{"certificate": issued, "conditions": ready}
	_, err = dc.Resource(CertificateRequests).Namespace(benchNS).UpdateStatus(ctx, rq, metav1.UpdateOptions{})
	return err
}

// BenchmarkReadUnchanged is one round's cert-manager read with nothing changed: "list" lists
// both resources (what every round did before the watch), "watch" reads the informers' stores.
// Run with -count to interleave them. cpu-ms/op is this process's CPU (the watch's goroutines
// included), not the API server's.
//
//	CERTDRIFT_CM_BENCH_N=2000 nice -n 19 go test ./probe/kube/certmanager/ -run '^$' -bench ReadUnchanged -benchtime 20x -count 5
func BenchmarkReadUnchanged(b *testing.B) {
	tb, n := benchPopulated(b)
	ctx := context.Background()
	check := func(b *testing.B, got kube.CertManager) {
		if got.Err != nil || len(got.Certificates) != n || len(got.Requests) != n || got.Requests[0].LeafSHA256 == "" {
			b.Fatalf("read: err %v, %d certificates, %d requests; want %d each, issued leaves read", got.Err, len(got.Certificates), len(got.Requests), n)
		}
	}
	b.Run("list", func(b *testing.B) {
		r, err := New(tb.Config, Options{Namespaces: []string{benchNS}})
		if err != nil {
			b.Fatal(err)
		}
		check(b, r.Read(ctx))
		benchLoop(b, func() { check(b, r.Read(ctx)) })
	})
	b.Run("watch", func(b *testing.B) {
		r, err := New(tb.Config, Options{Namespaces: []string{benchNS}})
		if err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done, err := r.Start(wctx)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { cancel(); <-done }()
		check(b, r.Read(ctx)) // the initial list, outside the timer
		benchLoop(b, func() { check(b, r.Read(ctx)) })
	})
}

func benchLoop(b *testing.B, op func()) {
	b.ReportAllocs()
	cpu0 := selfCPU(b)
	b.ResetTimer()
	for b.Loop() {
		op()
	}
	b.StopTimer()
	b.ReportMetric(float64((selfCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBinaries runs whole certdrift binaries against the populated cluster (no Envoy pods):
// `audit -o json` (peak RSS, CPU-s) and `serve --interval 2s` (RSS after 15 s of rounds, CPU per
// round). CERTDRIFT_CM_BINS names them, "name=path,name=path" (e.g. the commit before the watch
// and this one); the order alternates between iterations, so -count interleaves them.
//
//	CERTDRIFT_CM_BINS=before=/tmp/certdrift-before,after=/tmp/certdrift-after nice -n 19 go test ./probe/kube/certmanager/ -run '^$' -bench Binaries -benchtime 1x -count 3 -timeout 30m
func BenchmarkBinaries(b *testing.B) {
	spec := os.Getenv("CERTDRIFT_CM_BINS")
	if spec == "" {
		b.Fatal("set CERTDRIFT_CM_BINS=name=path,... to certdrift binaries (go build -o PATH ./cmd/certdrift at each commit)")
	}
	tb, n := benchPopulated(b)
	for _, nb := range strings.Split(spec, ",") {
		name, bin, ok := strings.Cut(nb, "=")
		if !ok {
			b.Fatalf("CERTDRIFT_CM_BINS: %q is not name=path", nb)
		}
		b.Run("audit/"+name, func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(bin, "audit", "--kubeconfig", tb.KubeconfigPath, "-o", "json")
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.TempDir()}
				var out bytes.Buffer
				cmd.Stdout = &out
				start := time.Now()
				err := cmd.Run()
				wall := time.Since(start)
				if code := cmd.ProcessState.ExitCode(); err != nil && code != 1 {
					b.Fatalf("%s audit: %v", name, err)
				}
				if c := strings.Count(out.String(), `"secret_revision"`); c < n {
					b.Fatalf("%s audit: %d Certificates in the report, want %d", name, c, n)
				}
				ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
				b.ReportMetric(float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9, "cpu-s")
				b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MB")
				b.ReportMetric(wall.Seconds(), "wall-s")
			}
		})
		b.Run("serve/"+name, func(b *testing.B) {
			for b.Loop() {
				serveOnce(b, bin, tb.KubeconfigPath)
			}
		})
	}
}

func serveOnce(b *testing.B, bin, kubeconfig string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var logs syncBuf
	cmd := exec.Command(bin, "serve", "--kubeconfig", kubeconfig, "--web.listen-address", addr, "--interval", "2s", "--log.level", "debug")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.TempDir()}
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > 3*time.Minute {
			b.Fatalf("serve not ready:\n%s", logs.String())
		}
	}
	time.Sleep(3 * time.Second)
	rounds := func() int { return strings.Count(logs.String(), `msg="round complete"`) }
	cpu0, r0 := procStat(b, cmd.Process.Pid, "cpu"), rounds()
	time.Sleep(15 * time.Second)
	cpu, r := procStat(b, cmd.Process.Pid, "cpu")-cpu0, rounds()-r0
	if r < 2 {
		b.Fatalf("%d rounds in 15 s with --interval 2s:\n%s", r, logs.String())
	}
	if !strings.Contains(logs.String(), `certificates=`+strconv.Itoa(benchPop.n)) {
		b.Fatalf("serve never read the %d Certificates:\n%s", benchPop.n, logs.String())
	}
	b.ReportMetric(float64(cpu)/float64(r), "cpu-ms/round")
	b.ReportMetric(float64(procStat(b, cmd.Process.Pid, "VmRSS"))/1024, "rss-MB")
	b.ReportMetric(float64(procStat(b, cmd.Process.Pid, "VmHWM"))/1024, "hwm-MB")
}

// procStat reads a running process's CPU ("cpu": user+system, ms) or a /proc/<pid>/status field
// in kB.
func procStat(b *testing.B, pid int, what string) int64 {
	if what == "cpu" {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		return (u + s) * 10 // USER_HZ 100
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == what {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("/proc/%d/status %s: %q", pid, k, v)
			}
			return kb
		}
	}
	b.Fatalf("/proc/%d/status: no %s", pid, what)
	return 0
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
