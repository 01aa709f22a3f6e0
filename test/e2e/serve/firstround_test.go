package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

// TestServeStartedAfterRotation: certdrift serve starts after a rotation it never saw. A static
// TLS Envoy still holds v1, and the Secret volume switched to v2 ten minutes earlier (its data
// directory's mtime says so). The first scrape must already carry what `certdrift audit` reports
// on the same world — the STALE_* findings — with the drift dated from the rotation, not from the
// process start, and the binding counted as a pending rotation. When that Envoy is restarted and
// loads v2, the convergence histogram observes it, timed from the rotation.
func TestServeStartedAfterRotation(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("first-round-e2e-ca"))
	leaf := func(cn string) *certs.Leaf {
		return ca.Leaf(t, certs.WithCommonName(cn), certs.WithDNSNames(host), certs.WithFreshKey())
	}
	v1, v2 := leaf("v1"), leaf("v2")
	web := secretDir(t, "web")
	project(t, web, ca, v1)
	static := startStatic(t, web)
	project(t, web, ca, v2)
	// The rotation happened ten minutes before certdrift started: date the data directory (the
	// "..data" target, whose mtime is the source's change time) back.
	target, err := os.Readlink(filepath.Join(web, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	rotated := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	if err := os.Chtimes(filepath.Join(web, target), rotated, rotated); err != nil {
		t.Fatal(err)
	}

	cfgPath := filepath.Join(t.TempDir(), "certdrift.yaml")
	writeCfg := func() {
		body := fmt.Sprintf("desired:\n  - name: web\n    dir: %s\nenvoys:%s\npolicy:\n  grace: 1m\n", web, envoyEntry(t, "static", static))
		if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg()

	// The one-shot audit of the same world.
	out, err := exec.Command(certdriftBin, "audit", "--config", cfgPath, "-o", "json").Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("certdrift audit: %v (want exit 1, findings)\n%s", err, out)
	}
	var report struct {
		Findings []struct {
			Code, Severity string
			Subject        struct{ Envoy, Source, Secret, SNI string }
		}
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("audit -o json: %v\n%s", err, out)
	}
	var want []string
	for _, f := range report.Findings {
		s := f.Subject
		want = append(want, strings.Join([]string{f.Code, f.Severity, s.Envoy, s.Source, s.Secret, s.SNI}, "|"))
	}
	slices.Sort(want)
	want = slices.Compact(want)
	for _, code := range []string{"STALE_LOADED", "STALE_SERVED"} {
		if !slices.ContainsFunc(want, func(k string) bool { return strings.HasPrefix(k, code+"|") }) {
			t.Fatalf("certdrift audit did not report %s: the comparison would prove nothing\n%s", code, out)
		}
	}

	// One round at start, then only on reload: the first scrape is the first round.
	started := time.Now()
	x := startServe(t, "--config", cfgPath, "--interval", "1h")
	waitFor(t, "certdrift serve to be ready", 30*time.Second, func() (bool, string) {
		resp, err := http.Get("http://" + x.Addr + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status + "\n" + x.Logs.String()
	})
	first := parseMetrics(t, x.metrics(t))
	if got := value(first, "certdrift_rounds_total", nil); got != 1 {
		t.Fatalf("certdrift_rounds_total = %v at the first scrape, want 1", got)
	}
	var got []string
	for _, m := range first["certdrift_finding"].GetMetric() {
		l := labels(m)
		got = append(got, strings.Join([]string{l["code"], l["severity"], l["envoy"], l["source"], l["secret"], l["sni"]}, "|"))
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("first-round findings of serve differ from audit's (-audit +serve):\n%s", diff)
	}
	age := value(first, "certdrift_drift_age_seconds", map[string]string{"envoy": "static", "source": "web"})
	if lo, hi := started.Sub(rotated).Seconds(), time.Since(rotated).Seconds()+1; age < lo || age > hi {
		t.Errorf("drift age %vs at the first scrape, want %.0f..%.0fs: since the rotation, not since certdrift started", age, lo, hi)
	}
	if got := value(first, "certdrift_bindings_converging", nil); got != 1 {
		t.Errorf("certdrift_bindings_converging = %v at the first scrape, want 1 (the stale static Envoy)", got)
	}
	if got := value(first, "certdrift_rotation_convergence_seconds", nil); got != 0 {
		t.Errorf("convergence histogram count %v before the Envoy restarted, want 0", got)
	}

	// The Envoy restarts (same name, new process and ports) and reads v2.
	static.Stop()
	restarted := startStatic(t, web)
	static = restarted
	writeCfg()
	x.signal(t, syscall.SIGHUP)
	var last map[string]*dto.MetricFamily
	waitFor(t, "the convergence to be observed", 30*time.Second, func() (bool, string) {
		last = parseMetrics(t, x.metrics(t))
		return value(last, "certdrift_rotation_convergence_seconds", nil) == 1, fmt.Sprint(last["certdrift_bindings"], "\n", x.Logs.String())
	})
	h := last["certdrift_rotation_convergence_seconds"].GetMetric()[0].GetHistogram()
	if lo, hi := started.Sub(rotated).Seconds(), time.Since(rotated).Seconds()+1; h.GetSampleSum() < lo || h.GetSampleSum() > hi {
		t.Errorf("convergence observed as %vs, want %.0f..%.0fs: from the rotation, not from certdrift's start", h.GetSampleSum(), lo, hi)
	}
	if got := value(last, "certdrift_bindings_converging", nil); got != 0 {
		t.Errorf("certdrift_bindings_converging = %v after the restart, want 0", got)
	}
	if n := len(last["certdrift_finding"].GetMetric()) + len(last["certdrift_drift_age_seconds"].GetMetric()); n != 0 {
		t.Errorf("%d finding or drift series after the restart, want none: %v", n, last["certdrift_finding"])
	}
}

func parseMetrics(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// value is the value of the one series of a family whose labels include match: a gauge's or
// counter's value, a histogram's count; -1 when there is not exactly one.
func value(mfs map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	var found []*dto.Metric
	for _, m := range mfs[name].GetMetric() {
		l := labels(m)
		ok := true
		for k, v := range match {
			ok = ok && l[k] == v
		}
		if ok {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		return -1
	}
	m := found[0]
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

// TestServeExposesTrustCAs: the CA of a Secret volume's ca.crt is exposed once in the desired
// view, and once in the loaded view for the real Envoy whose listener validates client
// certificates with it — identified by the fingerprint borrowed from the desired copy, since
// Envoy's /certs gives none.
func TestServeExposesTrustCAs(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("trust-e2e-ca"))
	web := secretDir(t, "web")
	project(t, web, ca, ca.Leaf(t, certs.WithCommonName("v1"), certs.WithDNSNames(host), certs.WithFreshKey()))
	mtls := envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.Bootstrap(envoytest.Listener{Chains: []envoytest.Chain{{
		CertFile: filepath.Join(web, "tls.crt"), KeyFile: filepath.Join(web, "tls.key"), ClientCAFile: filepath.Join(web, "ca.crt")}}})})
	cfgPath := filepath.Join(t.TempDir(), "certdrift.yaml")
	body := fmt.Sprintf("desired:\n  - name: web\n    dir: %s\nenvoys:\n  - name: mtls\n    admin: %s\n", web, mtls.AdminURL)
	if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	x := startServe(t, "--config", cfgPath, "--interval", "1h")
	var mfs map[string]*dto.MetricFamily
	waitFor(t, "the first round", 30*time.Second, func() (bool, string) {
		mfs = parseMetrics(t, x.metrics(t))
		return value(mfs, "certdrift_rounds_total", nil) == 1, x.Logs.String()
	})
	fp := pki.Fingerprint(ca.Cert)
	got := map[string]string{}
	for _, m := range mfs["certdrift_ca_certificate_info"].GetMetric() {
		l := labels(m)
		got[l["view"]] = l["fingerprint_sha256"] + " " + l["subject"]
	}
	want := map[string]string{"desired": fp + " " + ca.Cert.Subject.String(), "loaded": fp + " " + ca.Cert.Subject.String()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CA identity by view (-want +got):\n%s", diff)
	}
	for _, view := range []string{"desired", "loaded"} {
		if n := value(mfs, "certdrift_ca_certificate_bundles", map[string]string{"view": view}); n != 1 {
			t.Errorf("bundles holding the CA in the %s view: %v, want 1", view, n)
		}
		na := value(mfs, "certdrift_ca_certificate_not_after_timestamp_seconds", map[string]string{"view": view})
		if na != float64(ca.Cert.NotAfter.Unix()) {
			t.Errorf("CA not_after in the %s view: %v, want %d", view, na, ca.Cert.NotAfter.Unix())
		}
	}
}
