package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

// TB is the part of testing.TB the scenario uses; *testing.T and the command's runner have it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	TempDir() string
}

const host = "www.example.com"

// scenarioConfig shapes the data the dashboards are rendered from.
type scenarioConfig struct {
	Certdrift  string        // built certdrift binary; built from the repository when empty
	Prometheus string        // Prometheus binary
	Before     time.Duration // samples before the rotation
	After      time.Duration // samples after it
}

// lab is a running scenario: Prometheus holding certdrift's series since Start.
type lab struct {
	PromURL string
	Start   time.Time
}

// findPrometheus returns Debian's Prometheus server, or an error that says how to get it.
func findPrometheus() (string, error) {
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/prometheus"); err == nil {
		return "/usr/bin/prometheus", nil
	}
	return "", fmt.Errorf("prometheus not found on PATH or at /usr/bin/prometheus: install it with `apt-get install prometheus`")
}

// buildCertdrift builds ./cmd/certdrift from the repository into dir.
func buildCertdrift(ctx context.Context, dir string) (string, error) {
	root, err := envoytest.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "certdrift")
	cmd := exec.CommandContext(ctx, "nice", "-n", "10", "go", "build", "-o", bin, "./cmd/certdrift")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build certdrift: %w\n%s", err, out)
	}
	return bin, nil
}

// runScenario starts the same real parts as alerts/e2e_test.go: two Envoys serving one
// kubelet-style Secret volume (edge-sds through file-based SDS, which reloads; edge-static
// through a static tls_certificates context, which never does), plus a configured Envoy that
// does not exist (edge-gone, so coverage and probe-error panels have something to show), the
// real `certdrift serve`, and Prometheus scraping it every second. After cfg.Before the Secret
// rotates; edge-sds converges, edge-static goes stale. It returns after cfg.After more.
func runScenario(ctx context.Context, tb TB, cfg scenarioConfig) lab {
	tb.Helper()
	dir := tb.TempDir()
	bin := cfg.Certdrift
	if bin == "" {
		var err error
		if bin, err = buildCertdrift(ctx, dir); err != nil {
			tb.Fatalf("%v", err)
		}
	}
	ca := certs.NewCA(tb, certs.WithCommonName("dashboards-render-ca"))
	v1 := ca.Leaf(tb, certs.WithCommonName(host+" v1"), certs.WithDNSNames(host), certs.WithFreshKey())
	v2 := ca.Leaf(tb, certs.WithCommonName(host+" v2"), certs.WithDNSNames(host), certs.WithFreshKey())
	secret := filepath.Join(dir, "secret-volume")
	project := func(l *certs.Leaf) {
		tb.Helper()
		if err := atomicdir.Write(secret, map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM, "ca.crt": ca.CertPEM}); err != nil {
			tb.Fatalf("project the Secret into %s: %v", secret, err)
		}
	}
	project(v1)
	sdsFile := filepath.Join(dir, "sds.json")
	if err := envoytest.WriteSDSFile(sdsFile, envoytest.TLSSecret("web_cert",
		filepath.Join(secret, "tls.crt"), filepath.Join(secret, "tls.key"), secret)); err != nil {
		tb.Fatalf("write %s: %v", sdsFile, err)
	}
	sds := envoytest.Start(tb, envoytest.Config{Bootstrap: envoytest.FileSDSBootstrap(envoytest.SDSRef{Name: "web_cert", Path: sdsFile, WatchedDir: secret})})
	static := envoytest.Start(tb, envoytest.Config{Bootstrap: envoytest.StaticTLSBootstrap(filepath.Join(secret, "tls.crt"), filepath.Join(secret, "tls.key"))})
	gone := freeAddr(tb)
	conf := filepath.Join(dir, "certdrift.yaml")
	writeFile(tb, conf, fmt.Sprintf(`desired:
  - name: web
    dir: %s
envoys:
  - name: edge-sds
    admin: %s
    endpoints: [{address: %s, sni: [%s]}]
  - name: edge-static
    admin: %s
    endpoints: [{address: %s, sni: [%s]}]
  - name: edge-gone
    admin: http://%s
    endpoints: [{address: %s, sni: [%s]}]
policy:
  grace: 2s
`, secret, sds.AdminURL, sds.ListenerAddr(tb, "https"), host, static.AdminURL, static.ListenerAddr(tb, "https"), host, gone, gone, host))

	certdriftAddr := freeAddr(tb)
	start(tb, dir, "certdrift", bin, "serve", "--config", conf, "--web.listen-address", certdriftAddr, "--interval", "1s")
	waitHTTP(tb, "http://"+certdriftAddr+"/-/ready", 60*time.Second)

	writeFile(tb, filepath.Join(dir, "prometheus.yml"), fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: certdrift
    honor_labels: true
    static_configs: [{targets: ["%s"]}]
`, certdriftAddr))
	promAddr := freeAddr(tb)
	begin := time.Now()
	start(tb, dir, "prometheus", cfg.Prometheus, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr)
	waitHTTP(tb, "http://"+promAddr+"/-/ready", 60*time.Second)

	sleep(ctx, tb, cfg.Before)
	tb.Logf("rotating the Secret: edge-sds should converge, edge-static stay stale")
	project(v2)
	sleep(ctx, tb, cfg.After)
	return lab{PromURL: "http://" + promAddr, Start: begin}
}

func sleep(ctx context.Context, tb TB, d time.Duration) {
	tb.Helper()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		tb.Fatalf("interrupted: %v", ctx.Err())
	}
}

// start runs a process for the scenario's lifetime; its output goes to a log file in dir,
// whose tail is shown when the run fails.
func start(tb TB, dir, name, bin string, args ...string) {
	tb.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		tb.Fatalf("create %s log: %v", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s (%s): %v", name, bin, err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if tb.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			tb.Logf("--- end of %s log ---\n%s", name, b)
		}
	})
}

func waitHTTP(tb TB, url string, timeout time.Duration) {
	tb.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s not ready within %s (last: %v)", url, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freeAddr(tb TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func writeFile(tb TB, path, body string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		tb.Fatalf("write %s: %v", path, err)
	}
}
