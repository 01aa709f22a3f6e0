// Package adminquit proves the admin-quit reload strategy for real, outside Kubernetes: an Envoy
// with a static TLS context (it never reloads its certificate files) runs under a supervisor
// that restarts it whenever it exits, as systemd or runit would. After the files rotate,
// `certdrift audit --reload --yes --reload-strategy admin-quit` drains it
// (/drain_listeners?graceful), stops it (/quitquitquit), the supervisor starts it again, the
// restarted Envoy reads the new files, the post-check sees the new certificate served, and the
// next audit is clean.
package adminquit

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

const host = "www.example.com"

var certdriftBin string

func TestMain(m *testing.M) { cdbin.Main(m, &certdriftBin) }

// supervisor restarts an Envoy whenever it exits, like a process supervisor: the thing
// admin-quit relies on. Each start is counted.
type supervisor struct {
	bin, config, dir string

	mu     sync.Mutex
	starts int
	cur    *exec.Cmd
	stop   chan struct{}
	done   chan struct{}
}

func supervise(t *testing.T, bin, config, dir string) *supervisor {
	t.Helper()
	s := &supervisor{bin: bin, config: config, dir: dir, stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop(t)
	t.Cleanup(func() {
		close(s.stop)
		s.mu.Lock()
		if s.cur != nil && s.cur.Process != nil {
			_ = syscall.Kill(-s.cur.Process.Pid, syscall.SIGTERM)
		}
		s.mu.Unlock()
		<-s.done
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "envoy.log"))
			t.Logf("envoy log tail:\n%s", tail(string(log), 30))
		}
	})
	return s
}

func (s *supervisor) loop(t *testing.T) {
	defer close(s.done)
	for {
		cmd := exec.Command(s.bin, "-c", s.config, "-l", "info", "--log-path", filepath.Join(s.dir, "envoy.log"),
			"--disable-hot-restart", "--concurrency", "1", "--file-flush-interval-msec", "100")
		cmd.Dir = s.dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		s.mu.Lock()
		select {
		case <-s.stop:
			s.mu.Unlock()
			return
		default:
		}
		if err := cmd.Start(); err != nil {
			s.mu.Unlock()
			t.Errorf("supervisor: start envoy: %v", err)
			return
		}
		s.starts++
		s.cur = cmd
		s.mu.Unlock()
		_ = cmd.Wait()
		select {
		case <-s.stop:
			return
		case <-time.After(200 * time.Millisecond): // a supervisor's restart delay
		}
	}
}

func (s *supervisor) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// bootstrap is envoytest's static-TLS listener on a fixed port, with the admin on a fixed port
// too: a restarted Envoy must come back where the certdrift configuration points.
func bootstrap(t *testing.T, path string, adminPort, httpsPort int, certFile, keyFile string) {
	t.Helper()
	tmpl := envoytest.Bootstrap(envoytest.Listener{Port: httpsPort, Chains: []envoytest.Chain{{CertFile: certFile, KeyFile: keyFile}}})
	var doc map[string]any
	if err := json.Unmarshal([]byte(tmpl), &doc); err != nil {
		t.Fatalf("envoytest bootstrap is not JSON: %v", err)
	}
	doc["admin"] = map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": adminPort}}}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func waitReady(t *testing.T, adminURL string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		resp, err := hc.Get(adminURL + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("envoy admin %s not ready after %s", adminURL, timeout)
}

// served dials addr and returns the leaf's fingerprint: a check independent of certdrift.
func served(addr string) string {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: host, InsecureSkipVerify: true})
	if err != nil {
		return "dial error: " + err.Error()
	}
	defer conn.Close()
	return pki.Fingerprint(conn.ConnectionState().PeerCertificates[0])
}

type result struct {
	Strategy string `json:"strategy"`
	Target   struct {
		Envoy string `json:"envoy"`
	} `json:"target"`
	Outcome string `json:"outcome"`
	Skip    string `json:"skip"`
	Detail  string `json:"detail"`
}

type run struct {
	code     int
	findings []struct {
		Code    string `json:"code"`
		Subject struct {
			Envoy string `json:"envoy"`
		} `json:"subject"`
	}
	reload []result
	out    string
}

func certdrift(t *testing.T, keys [][]byte, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cdbin.Run(ctx, certdriftBin, os.Environ(), args...)
	if err != nil {
		t.Fatal(err)
	}
	r := run{code: res.Code, out: "$ certdrift " + strings.Join(args, " ") + "\n" + res.Output()}
	if cdbin.LeaksKey(r.out, keys) {
		t.Fatalf("certdrift printed private key material")
	}
	var doc struct {
		Findings []struct {
			Code    string `json:"code"`
			Subject struct {
				Envoy string `json:"envoy"`
			} `json:"subject"`
		} `json:"findings"`
		Reload *struct {
			Results []result `json:"results"`
		} `json:"reload"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &doc); err != nil {
		t.Fatalf("certdrift exit %d: output is not one JSON document: %v\n%s", r.code, err, r.out)
	}
	r.findings = doc.Findings
	if doc.Reload != nil {
		r.reload = doc.Reload.Results
	}
	return r
}

func TestAdminQuitUnderSupervisor(t *testing.T) {
	bin := envoytest.ResolveBinary(t)
	ca := certs.NewCA(t, certs.WithCommonName("e2e-adminquit-ca"))
	leaf := func(cn string) *certs.Leaf {
		return ca.Leaf(t, certs.WithCommonName(cn), certs.WithDNSNames(host), certs.WithFreshKey())
	}
	v1, v2 := leaf("v1"), leaf("v2")
	keys := [][]byte{v1.KeyPEM, v2.KeyPEM}
	secretDir := filepath.Join(t.TempDir(), "secret")
	if err := os.MkdirAll(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(l *certs.Leaf) {
		if err := atomicdir.Write(secretDir, map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM, "ca.crt": ca.CertPEM}); err != nil {
			t.Fatalf("project secret: %v", err)
		}
	}
	write(v1)

	adminPort, err := envoytest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpsPort, err := envoytest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	envoyDir := t.TempDir()
	boot := filepath.Join(envoyDir, "bootstrap.json")
	bootstrap(t, boot, adminPort, httpsPort, filepath.Join(secretDir, "tls.crt"), filepath.Join(secretDir, "tls.key"))
	sup := supervise(t, bin.Path, boot, envoyDir)
	adminURL := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	addr := fmt.Sprintf("127.0.0.1:%d", httpsPort)
	waitReady(t, adminURL, 60*time.Second)

	cfg := filepath.Join(t.TempDir(), "certdrift.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `desired:
  - name: web
    dir: %s
envoys:
  - name: edge
    admin: %s
    endpoints:
      - address: %s
        sni: [%s]
policy:
  grace: 1s
`, secretDir, adminURL, addr, host), 0o644); err != nil {
		t.Fatal(err)
	}
	audit := func(extra ...string) run {
		return certdrift(t, keys, append([]string{"audit", "--config", cfg, "-o", "json"}, extra...)...)
	}

	if r := audit(); r.code != 0 || len(r.findings) != 0 {
		t.Fatalf("before the rotation: exit %d with %d findings, want clean\n%s", r.code, len(r.findings), r.out)
	}

	write(v2)
	time.Sleep(3 * time.Second) // past the 1s grace: the static context is provably stale
	if got := served(addr); got != pki.Fingerprint(v1.Cert) {
		t.Fatalf("after the rotation the static Envoy serves %s, want still v1 %s", got, pki.Fingerprint(v1.Cert))
	}
	r := audit()
	stale := map[string]bool{}
	for _, f := range r.findings {
		if f.Subject.Envoy == "edge" {
			stale[f.Code] = true
		}
	}
	if r.code != 1 || !stale["STALE_SERVED"] {
		t.Fatalf("after the rotation: exit %d, edge findings %v; want exit 1 and STALE_SERVED\n%s", r.code, stale, r.out)
	}

	// No strategy outside Kubernetes unless one is named: the plan says so and acts on nothing.
	r = audit("--reload", "--yes")
	if len(r.reload) != 1 || r.reload[0].Outcome != "skipped" || r.reload[0].Skip != "no_strategy" || sup.Starts() != 1 {
		t.Fatalf("--reload --yes without a strategy: results %+v, envoy starts %d; want one skipped (no_strategy) and no restart\n%s",
			r.reload, sup.Starts(), r.out)
	}

	start := time.Now()
	r = audit("--reload", "--yes", "--reload-strategy", "admin-quit", "--reload-drain-wait", "1s", "--reload-timeout", "90s")
	t.Logf("admin-quit run took %s:\n%s", time.Since(start).Round(time.Millisecond), r.out)
	if len(r.reload) != 1 {
		t.Fatalf("admin-quit: %d reload results, want 1\n%s", len(r.reload), r.out)
	}
	res := r.reload[0]
	if res.Strategy != "admin-quit" || res.Target.Envoy != "edge" || res.Outcome != "done" {
		t.Fatalf("admin-quit: %s on %s → %s (%s), want admin-quit on edge → done\n%s", res.Strategy, res.Target.Envoy, res.Outcome, res.Detail, r.out)
	}
	if !strings.Contains(res.Detail, "serves the desired leaf of web") || !strings.Contains(res.Detail, pki.Fingerprint(v2.Cert)[:16]) {
		t.Errorf("admin-quit post-check %q does not name the desired leaf of web (v2 sha256 %s)", res.Detail, pki.Fingerprint(v2.Cert)[:16])
	}
	if r.code != 1 {
		t.Errorf("admin-quit: exit %d, want 1 (the report judged before the repair has findings; nothing failed)", r.code)
	}
	if n := sup.Starts(); n != 2 {
		t.Errorf("the supervisor started Envoy %d times, want 2 (once, and once after /quitquitquit)", n)
	}
	if got := served(addr); got != pki.Fingerprint(v2.Cert) {
		t.Errorf("after admin-quit the Envoy serves %s, want v2 %s", got, pki.Fingerprint(v2.Cert))
	}
	if r := audit(); r.code != 0 || len(r.findings) != 0 {
		t.Fatalf("after admin-quit: exit %d with %d findings, want a clean audit\n%s", r.code, len(r.findings), r.out)
	}
}
