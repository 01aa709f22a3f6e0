package serve

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden")

const host = "www.example.com"

// secretDir is a directory in the kubelet's Secret-volume layout.
func secretDir(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func project(t *testing.T, dir string, ca *certs.Authority, l *certs.Leaf) {
	t.Helper()
	if err := atomicdir.Write(dir, map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM, "ca.crt": ca.CertPEM}); err != nil {
		t.Fatalf("project secret: %v", err)
	}
}

func startSDS(t *testing.T, dir string) *envoytest.Envoy {
	t.Helper()
	sdsPath := filepath.Join(t.TempDir(), "sds.json")
	if err := envoytest.WriteSDSFile(sdsPath, envoytest.TLSSecret("web_cert",
		filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), dir)); err != nil {
		t.Fatal(err)
	}
	return envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.FileSDSBootstrap(envoytest.SDSRef{Name: "web_cert", Path: sdsPath, WatchedDir: dir})})
}

func startStatic(t *testing.T, dir string) *envoytest.Envoy {
	t.Helper()
	return envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.StaticTLSBootstrap(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))})
}

func envoyEntry(t *testing.T, name string, e *envoytest.Envoy) string {
	return fmt.Sprintf("\n  - name: %s\n    admin: %s\n    endpoints:\n      - address: %s\n        sni: [%s]",
		name, e.AdminURL, e.ListenerAddr(t, "https"), host)
}

// TestServeRotationThroughPrometheus is the exporter's core story, seen the way a user sees it:
// through Prometheus. One Secret rotation, two Envoys: the file-based SDS Envoy converges and the
// convergence histogram observes it; the static one keeps the old leaf and the stale findings
// appear for it alone. Then a desired source is removed from the configuration (SIGHUP) and its
// series disappear.
func TestServeRotationThroughPrometheus(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("serve-e2e-ca"))
	leaf := func(cn string) *certs.Leaf {
		return ca.Leaf(t, certs.WithCommonName(cn), certs.WithDNSNames(host), certs.WithFreshKey())
	}
	v1, v2 := leaf("v1"), leaf("v2")
	web, extra := secretDir(t, "web"), secretDir(t, "extra")
	project(t, web, ca, v1)
	// Another host name: the audit's last-resort inference binds by DNS names.
	project(t, extra, ca, ca.Leaf(t, certs.WithCommonName("extra"), certs.WithDNSNames("extra.example.com"), certs.WithFreshKey()))
	sds, static := startSDS(t, web), startStatic(t, web)

	cfgPath := filepath.Join(t.TempDir(), "certdrift.yaml")
	envoys := "envoys:" + envoyEntry(t, "sds", sds) + envoyEntry(t, "static", static) + "\npolicy:\n  grace: 1s\n"
	writeCfg := func(withExtra bool) {
		body := fmt.Sprintf("desired:\n  - name: web\n    dir: %s\n", web)
		if withExtra {
			body += fmt.Sprintf("  - name: extra\n    dir: %s\n", extra)
		}
		if err := os.WriteFile(cfgPath, []byte(body+envoys), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(true)

	x := startServe(t, "--config", cfgPath, "--interval", "500ms", "--jitter", "0.1")
	prom := startPrometheus(t, x.Addr)
	count := func(q string) float64 {
		s := prom.query(t, q)
		if len(s) != 1 {
			return -1
		}
		return s[0].Value
	}
	waitFor(t, "Prometheus to see both bindings converged on v1", 30*time.Second, func() (bool, string) {
		return count(`certdrift_bindings{state="converged"}`) == 2, fmt.Sprint(prom.query(t, `certdrift_bindings`), "\n", x.Logs.String())
	})
	if got := prom.query(t, `certdrift_finding`); len(got) != 0 {
		t.Errorf("findings before the rotation: %v", got)
	}
	before := count(`certdrift_rotation_convergence_seconds_count`)
	if before != 0 {
		t.Errorf("convergence histogram count before any rotation = %v, want 0", before)
	}

	project(t, web, ca, v2)
	rotated := time.Now()
	waitFor(t, "the stale findings in Prometheus", 40*time.Second, func() (bool, string) {
		return len(prom.query(t, `certdrift_finding{code="STALE_SERVED"}`)) > 0, fmt.Sprint(prom.query(t, `certdrift_finding`))
	})
	t.Logf("stale finding visible in Prometheus %s after the rotation", time.Since(rotated).Round(100*time.Millisecond))
	stale := map[string][]string{}
	for _, s := range prom.query(t, `certdrift_finding`) {
		stale[s.Metric["envoy"]] = append(stale[s.Metric["envoy"]], s.Metric["code"])
	}
	for _, codes := range stale {
		sort.Strings(codes)
	}
	if diff := cmp.Diff(map[string][]string{"static": {"STALE_LOADED", "STALE_SERVED"}}, stale); diff != "" {
		t.Errorf("findings by Envoy (-want +got):\n%s", diff)
	}
	waitFor(t, "the convergence histogram to observe the SDS Envoy", 20*time.Second, func() (bool, string) {
		return count(`certdrift_rotation_convergence_seconds_count`) >= 1, fmt.Sprint(prom.query(t, `certdrift_rotation_convergence_seconds_count`))
	})
	if sum := count(`certdrift_rotation_convergence_seconds_sum`); sum <= 0 || sum > time.Since(rotated).Seconds()+1 {
		t.Errorf("convergence time %vs: want positive and no longer than since the rotation", sum)
	}
	if got := count(`certdrift_bindings_converging`); got != 1 {
		t.Errorf("certdrift_bindings_converging = %v, want 1 (the static Envoy)", got)
	}
	if got := prom.query(t, `certdrift_drift_age_seconds`); len(got) != 1 || got[0].Metric["envoy"] != "static" || got[0].Value <= 0 {
		t.Errorf("drift age: %v, want one positive series for the static Envoy", got)
	}
	// The views join on the fingerprint: the static Envoy serves v1 while its source holds v2.
	wantFP := map[string]string{"desired": pki.Fingerprint(v2.Cert), "sds": pki.Fingerprint(v2.Cert), "static": pki.Fingerprint(v1.Cert)}
	gotFP := map[string]string{}
	for _, s := range prom.query(t, `certdrift_certificate_info{source="web",view=~"desired|served"}`) {
		k := s.Metric["envoy"]
		if s.Metric["view"] == "desired" {
			k = "desired"
		}
		gotFP[k] = s.Metric["fingerprint_sha256"]
	}
	if diff := cmp.Diff(wantFP, gotFP); diff != "" {
		t.Errorf("desired/served fingerprints (-want +got):\n%s", diff)
	}

	checkMetricsBody(t, x.metrics(t), map[string]string{
		sds.AdminURL: "ADMIN_SDS", static.AdminURL: "ADMIN_STATIC",
		sds.ListenerAddr(t, "https"): "ADDR_SDS", static.ListenerAddr(t, "https"): "ADDR_STATIC",
		web: "WEB_DIR", extra: "EXTRA_DIR",
	})

	if len(prom.query(t, `certdrift_certificate_info{source="extra"}`)) == 0 {
		t.Fatal("the extra source has no series before its removal: the deletion check would prove nothing")
	}
	writeCfg(false)
	x.signal(t, syscall.SIGHUP)
	waitFor(t, "the removed source's series to disappear", 20*time.Second, func() (bool, string) {
		got := prom.query(t, `{source="extra"}`)
		return len(got) == 0, fmt.Sprint(got)
	})
	if got := count(`certdrift_config_last_reload_successful`); got != 1 {
		t.Errorf("certdrift_config_last_reload_successful = %v after a good reload", got)
	}
	if len(prom.query(t, `certdrift_source_up{source="files"} == 1`)) != 1 {
		t.Error("the files source is not up")
	}
	if strings.Contains(x.Logs.String(), "PRIVATE KEY") {
		t.Error("certdrift logged key material")
	}
}

// checkMetricsBody lints the whole /metrics with promtool and compares its shape (HELP, TYPE and
// each series with volatile label values and every sample value normalised) with a golden file.
func checkMetricsBody(t *testing.T, body string, replace map[string]string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is needed: apt-get install prometheus (%v)", err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	if strings.Contains(body, "PRIVATE KEY") {
		t.Error("/metrics contains key material")
	}
	got := normalise(body, replace)
	golden := filepath.Join("testdata", "metrics.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden (go test -run %s -update writes it): %v", t.Name(), err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("/metrics differs from %s (-want +got; -update rewrites it):\n%s", golden, diff)
	}
}

var (
	fpRE     = regexp.MustCompile(`fingerprint_sha256="[0-9a-f]{64}"`)
	serialRE = regexp.MustCompile(`serial="[0-9a-f]+"`)
	goRE     = regexp.MustCompile(`goversion="[^"]*"`)
	valueRE  = regexp.MustCompile(`\} \S+$|^(\w+) \S+$`)
)

// normalise keeps certdrift's own metrics with stable text: known addresses and paths become
// names, fingerprints, serials and sample values become placeholders.
func normalise(body string, replace map[string]string) string {
	keys := make([]string, 0, len(replace))
	for k := range replace {
		keys = append(keys, k)
	}
	// Longer first, so that a directory does not shadow a path inside it.
	slices.SortFunc(keys, func(a, b string) int { return len(b) - len(a) })
	var out []string
	for _, line := range strings.Split(body, "\n") {
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		if !strings.HasPrefix(name, "certdrift_") {
			continue
		}
		for _, k := range keys {
			line = strings.ReplaceAll(line, k, replace[k])
		}
		line = fpRE.ReplaceAllString(line, `fingerprint_sha256="FP"`)
		line = serialRE.ReplaceAllString(line, `serial="SERIAL"`)
		line = goRE.ReplaceAllString(line, `goversion="GO"`)
		if !strings.HasPrefix(line, "#") {
			line = valueRE.ReplaceAllStringFunc(line, func(m string) string {
				if strings.HasPrefix(m, "}") {
					return "} V"
				}
				return strings.Fields(m)[0] + " V"
			})
		}
		out = append(out, line)
	}
	// The exposition orders series by label values, and fingerprints are random per run: sort
	// each family's samples after normalising, so the golden does not depend on them.
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && !strings.HasPrefix(out[j], "#") {
			j++
		}
		slices.Sort(out[i:j])
		if j == i {
			j++
		}
		i = j
	}
	// Families in name order: the exposition may write the cached certificate families first.
	var blocks [][]string
	for _, line := range out {
		if strings.HasPrefix(line, "# HELP ") || len(blocks) == 0 {
			blocks = append(blocks, nil)
		}
		blocks[len(blocks)-1] = append(blocks[len(blocks)-1], line)
	}
	slices.SortFunc(blocks, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	out = out[:0]
	for _, b := range blocks {
		out = append(out, b...)
	}
	return strings.Join(out, "\n") + "\n"
}
