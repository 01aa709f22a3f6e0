package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
	"github.com/certdrift/certdrift/test/proc"
)

const e2eHost = "www.example.com"

// TestAlertsOnRealExposition runs the whole chain for real: two Envoys serving one Secret volume
// (file-based SDS, which reloads, and a static tls_certificates context, which never does), a
// configured Envoy that does not exist (edge-gone), the real `certdrift serve` watching them, and
// Debian's Prometheus scraping certdrift with these rules loaded. After a rotation the static
// Envoy must raise the stale alerts and the SDS one must not. The Secret's CA bundle holds a
// second CA that expires in 3 days: the CA expiry alert must fire for it, critical, and not for
// the long-lived CA beside it. One Envoy of three unreachable (33%) must raise the fleet-wide
// admin and handshake ratio alerts, once each, and no critical finding may page twice (the
// catch-all stays silent). Only the rules' `for:` durations are shortened (to 0s), so the test
// takes seconds: the expressions and labels are the shipped ones, checked against what certdrift
// really exposes.
func TestAlertsOnRealExposition(t *testing.T) {
	promBin := "/usr/bin/prometheus"
	if p, err := exec.LookPath("prometheus"); err == nil {
		promBin = p
	} else if _, err := os.Stat(promBin); err != nil {
		t.Fatal("prometheus not found on PATH or at /usr/bin/prometheus: install it with `apt-get install prometheus`")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "certdrift")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "nice", "-n", "10", "go", "build", "-o", bin, "./cmd/certdrift")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build certdrift: %v\n%s", err, out)
	}

	ca := certs.NewCA(t, certs.WithCommonName("alerts-e2e-ca"))
	v1 := ca.Leaf(t, certs.WithCommonName(e2eHost+" v1"), certs.WithDNSNames(e2eHost), certs.WithFreshKey())
	v2 := ca.Leaf(t, certs.WithCommonName(e2eHost+" v2"), certs.WithDNSNames(e2eHost), certs.WithFreshKey())
	// A CA rotation's bundle, [current, retiring]: the retiring CA expires in 3 days.
	retiring := certs.NewCA(t, certs.WithCommonName("alerts-e2e-retiring-ca"), certs.WithNotAfter(time.Now().Add(72*time.Hour)))
	bundle := append(append([]byte(nil), ca.CertPEM...), retiring.CertPEM...)
	secret := filepath.Join(dir, "secret-volume")
	project := func(l *certs.Leaf) {
		t.Helper()
		if err := atomicdir.Write(secret, map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM, "ca.crt": bundle}); err != nil {
			t.Fatalf("project the Secret: %v", err)
		}
	}
	project(v1)
	sdsFile := filepath.Join(dir, "sds.json")
	if err := envoytest.WriteSDSFile(sdsFile, envoytest.TLSSecret("web_cert",
		filepath.Join(secret, "tls.crt"), filepath.Join(secret, "tls.key"), secret)); err != nil {
		t.Fatal(err)
	}
	sds := envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.FileSDSBootstrap(envoytest.SDSRef{Name: "web_cert", Path: sdsFile, WatchedDir: secret})})
	static := envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.StaticTLSBootstrap(filepath.Join(secret, "tls.crt"), filepath.Join(secret, "tls.key"))})
	gone := proc.FreeAddr(t) // nothing listens there
	cfg := filepath.Join(dir, "certdrift.yaml")
	proc.WriteFile(t, cfg, fmt.Sprintf(`desired:
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
`, secret, sds.AdminURL, sds.ListenerAddr(t, "https"), e2eHost, static.AdminURL, static.ListenerAddr(t, "https"), e2eHost,
		gone, gone, e2eHost))

	certdriftAddr := proc.FreeAddr(t)
	proc.Start(t, dir, "certdrift", bin, "serve", "--config", cfg, "--web.listen-address", certdriftAddr, "--interval", "1s")
	proc.WaitHTTP(t, "http://"+certdriftAddr+"/-/ready", 60*time.Second)

	// The shipped rules with every for: set to 0s.
	var doc yaml.Node
	if err := yaml.Unmarshal(Rules, &doc); err != nil {
		t.Fatal(err)
	}
	zeroFor(&doc)
	rules, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	proc.WriteFile(t, filepath.Join(dir, "rules.yaml"), string(rules))
	proc.WriteFile(t, filepath.Join(dir, "prometheus.yml"), fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%s]
scrape_configs:
  - job_name: certdrift
    honor_labels: true
    static_configs: [{targets: ["%s"]}]
`, filepath.Join(dir, "rules.yaml"), certdriftAddr))
	promAddr := proc.FreeAddr(t)
	proc.Start(t, dir, "prometheus", promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr)
	proc.WaitHTTP(t, "http://"+promAddr+"/-/ready", 60*time.Second)

	// Before the rotation, both Envoys are converged: give Prometheus a few evaluations.
	time.Sleep(5 * time.Second)
	if got := alerts(t, promAddr, "CertdriftStale"); len(got) != 0 {
		t.Fatalf("stale alerts before any rotation: %v", got)
	}

	project(v2)
	deadline := time.Now().Add(90 * time.Second)
	want := map[string]bool{"CertdriftStaleLoadedCertificate edge-static": true, "CertdriftStaleServedCertificate edge-static": true}
	var got []string
	for time.Now().Before(deadline) {
		got = alerts(t, promAddr, "CertdriftStale")
		n := 0
		for _, a := range got {
			if want[a] {
				n++
			}
		}
		if n == len(want) {
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("firing after the rotation: %v", got)
	for a := range want {
		if !contains(got, a) {
			t.Errorf("alert %q not firing after the rotation; firing: %v", a, got)
		}
	}
	for _, a := range got {
		if strings.HasSuffix(a, " edge-sds") {
			t.Errorf("alert %q fires for the Envoy that reloaded", a)
		}
	}
	if got := alerts(t, promAddr, "CertdriftNotAuditing"); len(got) != 0 {
		t.Errorf("certdrift rounds complete every second, yet %v fires", got)
	}

	// The retiring CA of the bundle: one critical alert, named by its subject; the current CA
	// (ten years) none.
	waitFiring(t, promAddr, 60*time.Second, func(a map[string]string) bool {
		return a["alertname"] == "CertdriftCACertificateExpiring" && strings.HasPrefix(a["subject"], "CN=alerts-e2e-retiring-ca,") && a["severity"] == "critical"
	})
	for _, a := range firing(t, promAddr) {
		if a["alertname"] == "CertdriftCACertificateExpiring" && !strings.HasPrefix(a["subject"], "CN=alerts-e2e-retiring-ca,") {
			t.Errorf("CertdriftCACertificateExpiring fires for a CA that does not expire soon: %v", a)
		}
	}
	// edge-gone: one alert each for the fleet's unreachable admins and failed handshakes, none
	// per Envoy.
	for _, name := range []string{"CertdriftEnvoyAdminsDown", "CertdriftHandshakesFailing"} {
		waitFiring(t, promAddr, 60*time.Second, func(a map[string]string) bool { return a["alertname"] == name })
		var n int
		for _, a := range firing(t, promAddr) {
			if a["alertname"] == name {
				n++
				if a["envoy"] != "" || a["job"] != "certdrift" {
					t.Errorf("%s should be one alert for the job, got labels %v", name, a)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s fires %d times, want once for the fleet", name, n)
		}
	}
	// No critical finding of this fleet lacks an alert of its own: the catch-all must not double
	// the CA's or the certificates' alerts.
	if got := alerts(t, promAddr, "CertdriftCriticalFinding"); len(got) != 0 {
		t.Errorf("the catch-all fires for findings that have alerts of their own: %v", got)
	}
}

// waitFiring waits until an alert matching ok fires, failing with what fires after timeout.
func waitFiring(t *testing.T, addr string, timeout time.Duration, ok func(map[string]string) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got []map[string]string
	for time.Now().Before(deadline) {
		got = firing(t, addr)
		for _, a := range got {
			if ok(a) {
				return
			}
		}
		time.Sleep(time.Second)
	}
	t.Errorf("the expected alert did not fire within %s; firing: %v", timeout, got)
}

// alerts lists the firing alerts whose name starts with prefix, as "name envoy".
func alerts(t *testing.T, addr, prefix string) []string {
	t.Helper()
	var out []string
	for _, a := range firing(t, addr) {
		if strings.HasPrefix(a["alertname"], prefix) {
			out = append(out, a["alertname"]+" "+a["envoy"])
		}
	}
	return out
}

// firing returns the labels of every firing alert.
func firing(t *testing.T, addr string) []map[string]string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/v1/alerts")
	if err != nil {
		t.Fatalf("query Prometheus alerts: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("decode Prometheus alerts: %v", err)
	}
	var out []map[string]string
	for _, a := range body.Data.Alerts {
		if a.State == "firing" {
			out = append(out, a.Labels)
		}
	}
	return out
}

func zeroFor(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "for" {
				n.Content[i+1].Value = "0s"
			}
		}
	}
	for _, c := range n.Content {
		zeroFor(c)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
