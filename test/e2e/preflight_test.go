package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

// preflightJSON runs `certdrift preflight -o json` and decodes the report.
func preflightJSON(t *testing.T, args ...string) (int, audit.PreflightReport, string) {
	t.Helper()
	code, out, errOut := run(t, append([]string{"preflight", "-o", "json"}, args...)...)
	var r audit.PreflightReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("certdrift preflight exit %d, output is not a JSON report: %v\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	return code, r, errOut
}

// pemLine is the first base64 line of a PEM block: enough of it to recognise in output.
func pemLine(p []byte) string {
	lines := strings.Split(string(p), "\n")
	if len(lines) < 2 {
		return string(p)
	}
	return lines[1]
}

func reloadsBy(r audit.PreflightReport, mode string) []string {
	var out []string
	for _, x := range r.Reloads {
		if x.Mode == mode && x.What == "leaf" {
			out = append(out, x.Envoy)
		}
	}
	slices.Sort(out)
	return out
}

// TestPreflightPredictsStaticStale: two real Envoys read one Secret directory, one through a
// static TLS context, one through file-based SDS watching the directory. Preflight on a new leaf
// says the SDS one reloads it and the static one needs a restart; then the leaf is really
// rotated and the audit shows exactly that: the static Envoy STALE_LOADED and STALE_SERVED, the
// SDS one converged. Controls: a leaf that does not cover the served SNI is refused (exit 1,
// both Envoys named), and bad input exits 2 naming the file or the source.
func TestPreflightPredictsStaticStale(t *testing.T) {
	w := newSDSAndStatic(t)
	v1, v2 := w.v1, w.v2
	cfg := w.config(t, "", "")
	cand := filepath.Join(t.TempDir(), "v2.crt")
	if err := os.WriteFile(cand, v2.ChainPEM(), 0o600); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	code, r, _ := preflightJSON(t, "--config", cfg, "--leaf", "web="+cand)
	t.Logf("preflight took %s: verdict %s, %d handshakes, reloads %+v, steps %q", time.Since(start).Round(time.Millisecond), r.Verdict, len(r.Handshakes), r.Reloads, r.Steps)
	if code != 0 || r.Verdict != audit.PreflightSafe {
		t.Errorf("preflight of a new leaf from the same CA: exit %d, verdict %s; want 0, safe", code, r.Verdict)
	}
	if got, want := reloadsBy(r, audit.ReloadSelf), []string{"sds"}; !slices.Equal(got, want) {
		t.Errorf("Envoys predicted to reload the leaf by themselves: %v, want %v", got, want)
	}
	if got, want := reloadsBy(r, audit.ReloadRestart), []string{"static"}; !slices.Equal(got, want) {
		t.Errorf("Envoys predicted to need a restart: %v, want %v", got, want)
	}
	accepted := 0
	for _, h := range r.Handshakes {
		if h.Phase == audit.PhaseNewLeafSNI && h.Result == audit.HandshakeAccepts && h.Leaf.FingerprintSHA256 == pki.Fingerprint(v2.Cert) {
			accepted++
		}
	}
	if accepted != 2 {
		t.Errorf("want the new leaf judged against the SNI %s of both Envoys and accepted, got %+v", host, r.Handshakes)
	}
	if !slices.ContainsFunc(r.Steps, func(s string) bool { return strings.Contains(s, "Restart static") }) {
		t.Errorf("steps %q: want a restart of the static Envoy", r.Steps)
	}
	predicted := r
	_, table, _ := run(t, "preflight", "--config", cfg, "--leaf", "web="+cand)
	t.Logf("table:\n%s", table)

	// Control: a leaf for another name would be refused by the clients of both Envoys.
	wrong := w.ca.Leaf(t, certs.WithCommonName("other"), certs.WithDNSNames("other.example.org"))
	wrongPath := filepath.Join(t.TempDir(), "wrong.crt")
	if err := os.WriteFile(wrongPath, wrong.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	code, r, _ = preflightJSON(t, "--config", cfg, "--leaf", "web="+wrongPath)
	var rejected []string
	for _, h := range r.Handshakes {
		if h.Result == audit.HandshakeRejects {
			rejected = append(rejected, h.Presenter)
		}
	}
	slices.Sort(rejected)
	if code != 1 || r.Verdict != audit.PreflightBreaks || !slices.Equal(rejected, []string{"sds", "static"}) {
		t.Errorf("control, a leaf that does not cover %s: exit %d, verdict %s, rejected at %v; want 1, breaks, [sds static]", host, code, r.Verdict, rejected)
	}

	// The same new leaf as a Secret manifest: with its own tls.key it is safe; with another
	// leaf's key every Envoy loading it would refuse the pair (exit 1, new_leaf_own_key), and no
	// byte of either key is in the output.
	other := w.ca.Leaf(t, certs.WithDNSNames(host), certs.WithFreshKey())
	for _, tc := range []struct {
		name      string
		key       []byte
		wantCode  int
		wantOwnOK bool
	}{{"its own key", v2.KeyPEM, 0, true}, {"another leaf's key", other.KeyPEM, 1, false}} {
		manifest := filepath.Join(t.TempDir(), "web.yaml")
		body := "apiVersion: v1\nkind: Secret\nmetadata: {name: web}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: " +
			base64.StdEncoding.EncodeToString(v2.ChainPEM()) + "\n  tls.key: " + base64.StdEncoding.EncodeToString(tc.key) + "\n"
		if err := os.WriteFile(manifest, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := run(t, "preflight", "-o", "json", "--config", cfg, "--secret", manifest)
		var r audit.PreflightReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("--secret with %s: exit %d, not a JSON report: %v\n%s", tc.name, code, err, errOut)
		}
		out += errOut
		own := slices.IndexFunc(r.Handshakes, func(h audit.PreflightHandshake) bool { return h.Phase == audit.PhaseNewLeafOwnKey })
		if code != tc.wantCode || own < 0 || (r.Handshakes[own].Result == audit.HandshakeAccepts) != tc.wantOwnOK {
			t.Errorf("--secret with %s: exit %d, handshakes %+v; want exit %d and the key phase accepting=%v", tc.name, code, r.Handshakes, tc.wantCode, tc.wantOwnOK)
		}
		if strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, pemLine(tc.key)) {
			t.Errorf("--secret with %s: the output carries key material", tc.name)
		}
	}

	// Cannot tell: a third Envoy whose admin does not answer might load web too (its bindings come
	// from that admin): exit 3, naming it.
	port, err := envoytest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	deaf := w.config(t, fmt.Sprintf(`
  - name: deaf
    admin: http://127.0.0.1:%d`, port), "  timeout: 2s\n")
	code, r, _ = preflightJSON(t, "--config", deaf, "--leaf", "web="+cand)
	if code != 3 || r.Verdict != audit.PreflightUnknown || len(r.Unknowns) != 1 || !strings.Contains(r.Unknowns[0], "deaf") {
		t.Errorf("an Envoy whose admin does not answer: exit %d, verdict %s, unknowns %q; want 3, unknown, one naming deaf", code, r.Verdict, r.Unknowns)
	}

	// Bad input: exit 2 and a message naming what is wrong.
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--leaf", "web=" + filepath.Join(t.TempDir(), "missing.crt")}, "missing.crt"},
		{[]string{"--leaf", "nosuch=" + cand}, "nosuch"},
		{[]string{"--leaf", cand}, "SOURCE=FILE"},
		{[]string{"--secret", "web=" + cfg}, "kind"},
	} {
		code, out, errOut := run(t, append([]string{"preflight", "--config", cfg}, bad.args...)...)
		if code != 2 || !strings.Contains(errOut, bad.want) {
			t.Errorf("preflight %v: exit %d, stderr %q; want 2 and a message naming %q (stdout %q)", bad.args, code, errOut, bad.want, out)
		}
	}

	// Now rotate for real, and audit.
	w.rotate(t)
	code, ar := auditJSON(t, cfg)
	t.Logf("audit after the rotation: exit %d%s", code, describe(ar))
	staleEnvoys := map[string]bool{}
	for _, f := range ar.Findings {
		if f.Code == audit.StaleLoaded || f.Code == audit.StaleServed {
			staleEnvoys[f.Subject.Envoy] = true
		}
	}
	var converged []string
	for _, b := range ar.Bindings {
		if b.State == audit.StateConverged {
			converged = append(converged, b.Envoy)
		}
	}
	var stale []string
	for e := range staleEnvoys {
		stale = append(stale, e)
	}
	slices.Sort(stale)
	slices.Sort(converged)
	if got, want := stale, reloadsBy(predicted, audit.ReloadRestart); !slices.Equal(got, want) {
		t.Errorf("Envoys the audit finds stale after the rotation: %v; preflight predicted a restart for %v", got, want)
	}
	if !slices.Equal(converged, []string{"sds"}) {
		t.Errorf("converged bindings after the rotation: %v, want [sds] (what preflight said reloads by itself)", converged)
	}
	codesSeen := codes(ar)
	for _, c := range []audit.Code{audit.StaleLoaded, audit.StaleServed} {
		if fs := codesSeen[c]; len(fs) != 1 || fs[0].Subject.Envoy != "static" {
			t.Errorf("%s after the rotation: %d findings, want one on the static Envoy", c, len(fs))
		}
	}
	checkNoKeys(t, v1.KeyPEM, v2.KeyPEM, wrong.KeyPEM)
}
