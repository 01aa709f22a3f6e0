package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/proc"
)

func TestServeFlagErrors(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("desired: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	localCfg := filepath.Join(t.TempDir(), "local.yaml")
	if err := os.WriteFile(localCfg, []byte("desired:\n- {name: web, dir: /etc/tls}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		reason string
		args   []string
		want   string
	}{
		"NoWorld":              {"neither local nor Kubernetes mode", []string{"serve"}, "one of --config"},
		"LocalConfigInCluster": {"with --kubeconfig the file holds only pairings and policy", []string{"serve", "--config", localCfg, "--kubeconfig", cfg}, "only pairings and policy"},
		"ShardOutOfRange":      {"shard must be below total", []string{"serve", "--config", cfg, "--shard", "2", "--total-shards", "2"}, "--shard 2"},
		"NoShards":             {"total shards at least 1", []string{"serve", "--config", cfg, "--total-shards", "0"}, "--total-shards 0"},
		"TinyInterval":         {"an interval that would spin", []string{"serve", "--config", cfg, "--interval", "1ms"}, "--interval"},
		"BadJitter":            {"jitter beyond half the interval", []string{"serve", "--config", cfg, "--jitter", "0.9"}, "--jitter"},
		"BadWebConfig":         {"the web config is validated before serving", []string{"serve", "--config", cfg, "--web.config.file", cfg}, "--web.config.file"},
		"BadListen":            {"a listen address that cannot be bound", []string{"serve", "--config", cfg, "--web.listen-address", "256.0.0.1:1"}, "--web.listen-address"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			code := run(ctx, tc.args, streams{Out: &out, Err: &errb})
			if code != codeNoRun {
				t.Errorf("%s: exit %d, want %d; stderr:\n%s", tc.reason, code, codeNoRun, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("%s: stderr does not mention %q:\n%s", tc.reason, tc.want, errb.String())
			}
		})
	}
}

// blackhole accepts connections and never answers: an Envoy admin that hangs, so that the first
// round lasts until its deadline and readiness can be seen false.
func blackhole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func get(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, string(b)
}

func eventually(t *testing.T, what string, d time.Duration, f func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, s := f()
		if ok {
			return
		}
		last = s
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s; last:\n%s", what, d, last)
}

// TestServeLifecycle runs `certdrift serve` in-process in local mode: not ready until the first
// round, metrics from both registries, a failed and a successful reload, series of a removed
// Envoy gone, graceful exit on cancel.
func TestServeLifecycle(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, certs.WithCommonName("serve-ca"))
	leaf := ca.Leaf(t, certs.WithCommonName("web"), certs.WithDNSNames("www.example.com"))
	certs.WriteFiles(t, filepath.Join(dir, "web"), map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM})
	cfgPath := filepath.Join(dir, "certdrift.yaml")
	base := fmt.Sprintf("desired:\n  - name: web\n    dir: %s\n", filepath.Join(dir, "web"))
	withHole := base + fmt.Sprintf("envoys:\n  - name: hole\n    admin: http://%s\npolicy:\n  timeout: 1s\n", blackhole(t))
	write := func(s string) {
		if err := os.WriteFile(cfgPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(withHole)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &proc.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--config", cfgPath, "--web.listen-address", "127.0.0.1:0",
			"--web.probe-address", "127.0.0.1:0", "--interval", "300ms", "--jitter", "0"}, streams{Out: io.Discard, Err: logs})
	}()
	addrRE := regexp.MustCompile(`msg="serving (metrics|probes)" address=(\S+)`)
	addrs := map[string]string{}
	eventually(t, "the exporter to listen", 10*time.Second, func() (bool, string) {
		for _, m := range addrRE.FindAllStringSubmatch(logs.String(), -1) {
			addrs[m[1]] = m[2]
		}
		return len(addrs) == 2, logs.String()
	})
	metricsURL, probeURL := "http://"+addrs["metrics"], "http://"+addrs["probes"]

	if code, body := get(t, "GET", probeURL+"/-/ready"); code != http.StatusServiceUnavailable {
		t.Errorf("/-/ready during the first round (admin hangs for 1s): %d %q, want 503", code, body)
	}
	if code, _ := get(t, "GET", probeURL+"/-/healthy"); code != http.StatusOK {
		t.Errorf("/-/healthy: %d, want 200", code)
	}
	eventually(t, "/-/ready", 10*time.Second, func() (bool, string) {
		code, body := get(t, "GET", metricsURL+"/-/ready")
		return code == http.StatusOK, body
	})
	_, body := get(t, "GET", metricsURL+"/metrics")
	for _, want := range []string{
		`certdrift_source_up{source="files"} 1`,
		`certdrift_envoy_admin_up{envoy="hole"} 0`,
		`certdrift_finding{code="UNREACHABLE",envoy="hole"`,
		`certdrift_config_last_reload_successful 1`,
		`certdrift_build_info{goversion="go`,
		"go_goroutines ",
		"process_start_time_seconds ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	code, landing := get(t, "GET", metricsURL+"/")
	if code != http.StatusOK || !strings.Contains(landing, "certdrift") {
		t.Errorf("landing page: %d, body without the name", code)
	}
	// Every link on the landing page answers 200 (now that the first round is done): no link to
	// a page this server does not serve, such as pprof's.
	links := regexp.MustCompile(`href="([^"]+)"`).FindAllStringSubmatch(landing, -1)
	if len(links) < 3 {
		t.Errorf("landing page has %d links, want at least /metrics, /-/ready and /-/healthy:\n%s", len(links), landing)
	}
	for _, l := range links {
		u := l[1]
		if !strings.HasPrefix(u, "/") {
			t.Errorf("landing page links %q, outside this server", u)
			continue
		}
		if code, _ := get(t, "GET", metricsURL+u); code != http.StatusOK {
			t.Errorf("landing page link %s answers %d, want 200", u, code)
		}
	}
	// Control: pprof is not served, so a pprof link (the toolkit's default) would fail above.
	if code, _ := get(t, "GET", metricsURL+"/debug/pprof/heap"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/heap answers %d: if pprof is served now, its links may return to the landing page", code)
	}
	if code, _ := get(t, "GET", probeURL+"/metrics"); code != http.StatusNotFound {
		t.Errorf("probe port serves /metrics (%d): it must serve health only", code)
	}
	if code, _ := get(t, "GET", metricsURL+"/-/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload: %d, want 405", code)
	}

	write("desired: [\n")
	if code, body := get(t, "POST", metricsURL+"/-/reload"); code != http.StatusInternalServerError {
		t.Errorf("reload of a broken config: %d %q, want 500", code, body)
	}
	if _, body := get(t, "GET", metricsURL+"/metrics"); !strings.Contains(body, "certdrift_config_last_reload_successful 0") {
		t.Error("a failed reload is not reported by certdrift_config_last_reload_successful 0")
	}
	write(base)
	if code, body := get(t, "POST", metricsURL+"/-/reload"); code != http.StatusOK {
		t.Errorf("reload of a good config: %d %q, want 200", code, body)
	}
	eventually(t, "the removed Envoy's series to disappear", 10*time.Second, func() (bool, string) {
		_, body := get(t, "GET", metricsURL+"/metrics")
		return !strings.Contains(body, `envoy="hole"`) && strings.Contains(body, "certdrift_config_last_reload_successful 1"), body
	})

	cancel()
	select {
	case code := <-done:
		if code != codeClean {
			t.Errorf("exit %d after shutdown, want 0; logs:\n%s", code, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10s of its context ending")
	}
}

// TestServeWebConfigAuth: with a web config requiring basic auth, /metrics refuses anonymous
// scrapes while the plain probe port answers the kubelet without credentials.
func TestServeWebConfigAuth(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, certs.WithCommonName("serve-ca"))
	leaf := ca.Leaf(t, certs.WithCommonName("web"), certs.WithDNSNames("www.example.com"))
	certs.WriteFiles(t, filepath.Join(dir, "web"), map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM})
	cfgPath := filepath.Join(dir, "certdrift.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("desired:\n  - name: web\n    dir: %s\n", filepath.Join(dir, "web"))), 0o644); err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yaml")
	if err := os.WriteFile(webCfg, []byte(fmt.Sprintf("basic_auth_users:\n  prom: %s\n", hash)), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &proc.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--config", cfgPath, "--web.listen-address", "127.0.0.1:0", "--web.config.file", webCfg,
			"--web.probe-address", "127.0.0.1:0", "--interval", "1s"}, streams{Out: io.Discard, Err: logs})
	}()
	addrRE := regexp.MustCompile(`msg="serving (metrics|probes)" address=(\S+)`)
	addrs := map[string]string{}
	eventually(t, "the exporter to listen", 10*time.Second, func() (bool, string) {
		for _, m := range addrRE.FindAllStringSubmatch(logs.String(), -1) {
			addrs[m[1]] = m[2]
		}
		return len(addrs) == 2, logs.String()
	})
	eventually(t, "the probe port to report ready without credentials", 10*time.Second, func() (bool, string) {
		code, body := get(t, "GET", "http://"+addrs["probes"]+"/-/ready")
		return code == http.StatusOK, body
	})
	if code, _ := get(t, "GET", "http://"+addrs["metrics"]+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("anonymous /metrics: %d, want 401", code)
	}
	req, _ := http.NewRequest("GET", "http://"+addrs["metrics"]+"/metrics", nil)
	req.SetBasicAuth("prom", "s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "certdrift_build_info") {
		t.Errorf("/metrics with credentials: %d, certdrift_build_info present: %v", resp.StatusCode, strings.Contains(string(body), "certdrift_build_info"))
	}
	cancel()
	select {
	case code := <-done:
		if code != codeClean {
			t.Errorf("exit %d after shutdown, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Error("the password appears in the logs")
	}
}
