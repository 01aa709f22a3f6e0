package certmanager

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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

// BenchmarkReadUnchanged is one round's cert-manager read with nothing changed, before and after
// the watch, alternating within each iteration (go test's -count repeats a sub-benchmark back to
// back, not interleaved): "list" lists both resources as every round did before, "watch" reads the
// informers' stores. Each side's CPU is this process's (RUSAGE_SELF: the watch's goroutines and
// the GC included, the API server's not), its allocations runtime.MemStats' deltas.
//
//	CERTDRIFT_CM_BENCH_N=2000 nice -n 19 go test ./probe/kube/certmanager/ -run '^$' -bench ReadUnchanged -benchtime 10x -count 3
func BenchmarkReadUnchanged(b *testing.B) {
	tb, n := benchPopulated(b)
	ctx := context.Background()
	check := func(what string, got kube.CertManager) {
		if got.Err != nil || len(got.Certificates) != n || len(got.Requests) != n || got.Requests[0].LeafSHA256 == "" {
			b.Fatalf("%s: err %v, %d certificates, %d requests; want %d each, issued leaves read", what, got.Err, len(got.Certificates), len(got.Requests), n)
		}
	}
	// The list as every round read before the watch: pages of 500, the default then.
	listed, err := New(tb.Config, Options{Namespaces: []string{benchNS}, PageSize: 500})
	if err != nil {
		b.Fatal(err)
	}
	watched, err := New(tb.Config, Options{Namespaces: []string{benchNS}})
	if err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done, err := watched.Start(wctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { cancel(); <-done }()
	check("watch, initial list", watched.Read(ctx)) // outside the measurement
	lists := watched.w.lists.Load()

	type cost struct {
		cpu            time.Duration
		allocs, nbytes uint64
	}
	var costs [2]cost
	measure := func(c *cost, r *Reader, what string) cost {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		cpu0 := selfCPU(b)
		got := r.Read(ctx)
		one := cost{cpu: selfCPU(b) - cpu0}
		runtime.ReadMemStats(&m1)
		one.allocs, one.nbytes = m1.Mallocs-m0.Mallocs, m1.TotalAlloc-m0.TotalAlloc
		c.cpu, c.allocs, c.nbytes = c.cpu+one.cpu, c.allocs+one.allocs, c.nbytes+one.nbytes
		check(what, got)
		return one
	}
	for i := 0; b.Loop(); i++ {
		l := measure(&costs[0], listed, "list")
		w := measure(&costs[1], watched, "watch")
		b.Logf("iteration %d: list %v CPU, %d allocs, %.1f MB; watch %v CPU, %d allocs, %.2f MB",
			i, l.cpu, l.allocs, float64(l.nbytes)/1e6, w.cpu, w.allocs, float64(w.nbytes)/1e6)
	}
	if got := watched.w.lists.Load(); got != lists {
		b.Fatalf("the watch listed %d times during the benchmark: nothing changed", got-lists)
	}
	for i, name := range []string{"list", "watch"} {
		c := costs[i]
		b.ReportMetric(float64(c.cpu.Microseconds())/1000/float64(b.N), name+"-cpu-ms/op")
		b.ReportMetric(float64(c.allocs)/float64(b.N), name+"-allocs/op")
		b.ReportMetric(float64(c.nbytes)/1e6/float64(b.N), name+"-MB/op")
	}
}

func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBinaries runs whole certdrift binaries against the populated cluster (no Envoy pods),
// alternating between them within each iteration: `audit -o json` (CPU-s, peak RSS, wall) and
// `serve --interval 2s` (CPU per round and RSS after 15 s of rounds). CERTDRIFT_CM_BINS names
// them, "name=path,name=path" (e.g. the commit before the watch and this one), in turn, the order
// reversed each iteration. Each iteration's
// figures are logged too, for ranges.
//
//	CERTDRIFT_CM_BINS=before=/tmp/certdrift-before,after=/tmp/certdrift-after nice -n 19 go test ./probe/kube/certmanager/ -run '^$' -bench Binaries -benchtime 3x -timeout 30m
func BenchmarkBinaries(b *testing.B) {
	spec := os.Getenv("CERTDRIFT_CM_BINS")
	if spec == "" {
		b.Fatal("set CERTDRIFT_CM_BINS=name=path,... to certdrift binaries (go build -o PATH ./cmd/certdrift at each commit)")
	}
	tb, n := benchPopulated(b)
	type bin struct{ name, path string }
	var bins []bin
	for _, nb := range strings.Split(spec, ",") {
		name, path, ok := strings.Cut(nb, "=")
		if !ok {
			b.Fatalf("CERTDRIFT_CM_BINS: %q is not name=path", nb)
		}
		bins = append(bins, bin{name, path})
	}
	sums := map[string]float64{}
	for i := 0; b.Loop(); i++ {
		if i > 0 {
			slices.Reverse(bins) // neither binary always runs first
		}
		for _, bn := range bins {
			// Through /usr/bin/time: a child forked from this process starts with its RSS, and
			// wait4's ru_maxrss keeps that (≈ 80 MB here, whatever the child then uses).
			usage := filepath.Join(b.TempDir(), "usage")
			cmd := exec.Command("/usr/bin/time", "-o", usage, "-f", "%M %U %S", bn.path, "audit", "--kubeconfig", tb.KubeconfigPath, "-o", "json")
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.TempDir()}
			var out bytes.Buffer
			cmd.Stdout = &out
			start := time.Now()
			err := cmd.Run()
			wall := time.Since(start)
			if code := cmd.ProcessState.ExitCode(); err != nil && code != 1 {
				b.Fatalf("%s audit: %v", bn.name, err)
			}
			if c := strings.Count(out.String(), `"secret_revision"`); c < n {
				b.Fatalf("%s audit: %d Certificates in the report, want %d", bn.name, c, n)
			}
			cpu, rss := timeUsage(b, usage)
			sums[bn.name+"-audit-cpu-s"] += cpu
			sums[bn.name+"-audit-peak-rss-MB"] += rss
			sums[bn.name+"-audit-wall-s"] += wall.Seconds()
			b.Logf("iteration %d %s audit: %.2f CPU-s, peak RSS %.1f MB, wall %.2f s", i, bn.name, cpu, rss, wall.Seconds())
		}
		for _, bn := range bins {
			perRound, rss, hwm := serveOnce(b, bn.path, tb.KubeconfigPath, n)
			sums[bn.name+"-serve-cpu-ms/round"] += perRound
			sums[bn.name+"-serve-rss-MB"] += rss
			sums[bn.name+"-serve-hwm-MB"] += hwm
			b.Logf("iteration %d %s serve: %.0f CPU-ms per round, RSS %.1f MB (peak %.1f MB)", i, bn.name, perRound, rss, hwm)
		}
	}
	for k, v := range sums {
		b.ReportMetric(v/float64(b.N), k)
	}
}

// timeUsage reads /usr/bin/time's "%M %U %S" (the last line; one before says a non-zero exit):
// CPU-s and peak RSS in MB.
func timeUsage(b *testing.B, path string) (cpu, rssMB float64) {
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var kb int64
	var user, sys float64
	if _, err := fmt.Sscanf(lines[len(lines)-1], "%d %f %f", &kb, &user, &sys); err != nil {
		b.Fatalf("/usr/bin/time output %q: %v", raw, err)
	}
	return user + sys, float64(kb) / 1024
}

// serveOnce runs `serve` until 3 s after ready, then measures 15 s of rounds: CPU per round
// (idle included), RSS and its peak at the end, in MB.
func serveOnce(b *testing.B, bin, kubeconfig string, n int) (cpuPerRound, rss, hwm float64) {
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
	if !strings.Contains(logs.String(), `certificates=`+strconv.Itoa(n)) {
		b.Fatalf("serve never read the %d Certificates:\n%s", n, logs.String())
	}
	// The Go heap beside the RSS: live objects, or memory the runtime keeps.
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "go_memstats_heap_inuse_bytes ") || strings.HasPrefix(l, "go_memstats_heap_alloc_bytes ") ||
				strings.HasPrefix(l, "go_memstats_next_gc_bytes ") || strings.HasPrefix(l, "go_gc_duration_seconds_count ") {
				b.Logf("  %s", l)
			}
		}
	}
	return float64(cpu) / float64(r), float64(procStat(b, cmd.Process.Pid, "VmRSS")) / 1024, float64(procStat(b, cmd.Process.Pid, "VmHWM")) / 1024
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
