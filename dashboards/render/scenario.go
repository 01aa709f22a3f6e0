package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
	"github.com/certdrift/certdrift/test/proc"
)

// TB is the part of testing.TB the scenario uses; *testing.T and standalone.Runner have it.
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
	gone := proc.FreeAddr(tb)
	conf := filepath.Join(dir, "certdrift.yaml")
	proc.WriteFile(tb, conf, fmt.Sprintf(`desired:
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

	certdriftAddr := proc.FreeAddr(tb)
	proc.Start(tb, dir, "certdrift", bin, "serve", "--config", conf, "--web.listen-address", certdriftAddr, "--interval", "1s")
	proc.WaitHTTP(tb, "http://"+certdriftAddr+"/-/ready", 60*time.Second)

	proc.WriteFile(tb, filepath.Join(dir, "prometheus.yml"), fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: certdrift
    honor_labels: true
    static_configs: [{targets: ["%s"]}]
`, certdriftAddr))
	promAddr := proc.FreeAddr(tb)
	begin := time.Now()
	proc.Start(tb, dir, "prometheus", cfg.Prometheus, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr)
	proc.WaitHTTP(tb, "http://"+promAddr+"/-/ready", 60*time.Second)

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
