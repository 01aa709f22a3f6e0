package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

const host = "www.example.com"

// world is one Secret-volume directory with the Envoys that read it.
type world struct {
	ca        *certs.Authority
	secretDir string
	keys      [][]byte // every key written, for the key-material check
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{ca: certs.NewCA(t, certs.WithCommonName("e2e-ca")), secretDir: filepath.Join(t.TempDir(), "secret")}
	if err := os.MkdirAll(w.secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) leaf(t *testing.T, cn string) *certs.Leaf {
	return w.ca.Leaf(t, certs.WithCommonName(cn), certs.WithDNSNames(host), certs.WithFreshKey())
}

// write projects a cert and key into the secret directory the way the kubelet does.
func (w *world) write(t *testing.T, certPEM, keyPEM []byte) {
	t.Helper()
	w.keys = append(w.keys, keyPEM)
	if err := atomicdir.Write(w.secretDir, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": w.ca.CertPEM}); err != nil {
		t.Fatalf("project secret: %v", err)
	}
}

// startSDS starts an Envoy whose listener certificate is a file-based SDS secret reading the
// secret directory through its per-key symlinks, watching the directory for the ..data swap.
func (w *world) startSDS(t *testing.T) *envoytest.Envoy {
	t.Helper()
	sdsPath := filepath.Join(t.TempDir(), "sds.json")
	if err := envoytest.WriteSDSFile(sdsPath, envoytest.TLSSecret("web_cert",
		filepath.Join(w.secretDir, "tls.crt"), filepath.Join(w.secretDir, "tls.key"), w.secretDir)); err != nil {
		t.Fatal(err)
	}
	return envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.FileSDSBootstrap(envoytest.SDSRef{Name: "web_cert", Path: sdsPath, WatchedDir: w.secretDir})})
}

// startStatic starts an Envoy with a static tls_certificates context: it never reloads.
func (w *world) startStatic(t *testing.T) *envoytest.Envoy {
	t.Helper()
	return envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.StaticTLSBootstrap(
		filepath.Join(w.secretDir, "tls.crt"), filepath.Join(w.secretDir, "tls.key"))})
}

// envoyEntry is one envoys[] entry of a certdrift config.
func envoyEntry(t *testing.T, name string, e *envoytest.Envoy) string {
	return fmt.Sprintf(`
  - name: %s
    admin: %s
    endpoints:
      - address: %s
        sni: [%s]`, name, e.AdminURL, e.ListenerAddr(t, "https"), host)
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "certdrift.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// served dials addr with SNI and returns the leaf's fingerprint: an independent check of what
// Envoy serves, not through certdrift.
func served(t *testing.T, addr string) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: host, InsecureSkipVerify: true})
	if err != nil {
		return "dial error: " + err.Error()
	}
	defer conn.Close()
	return pki.Fingerprint(conn.ConnectionState().PeerCertificates[0])
}

// sdsAndStatic is the core story's setup: leaf v1 projected into the Secret directory, read by
// one Envoy through file-based SDS and by one through a static TLS context; v2 is the leaf a
// rotation brings.
type sdsAndStatic struct {
	*world
	v1, v2      *certs.Leaf
	sds, static *envoytest.Envoy
}

func newSDSAndStatic(t *testing.T) *sdsAndStatic {
	t.Helper()
	w := newWorld(t)
	s := &sdsAndStatic{world: w, v1: w.leaf(t, "v1"), v2: w.leaf(t, "v2")}
	s.write(t, s.v1.CertPEM, s.v1.KeyPEM)
	s.sds, s.static = s.startSDS(t), s.startStatic(t)
	return s
}

// config writes a certdrift config with the Secret directory as desired source "web" and both
// Envoys (named "sds" and "static"), a 1s grace; moreEnvoys and morePolicy are YAML appended to
// the envoys list and the policy.
func (s *sdsAndStatic) config(t *testing.T, moreEnvoys, morePolicy string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf(`desired:
  - name: web
    dir: %s
envoys:%s%s%s
policy:
  grace: 1s
%s`, s.secretDir, envoyEntry(t, "sds", s.sds), envoyEntry(t, "static", s.static), moreEnvoys, morePolicy))
}

// rotate projects v2, waits until the SDS Envoy serves it (the static one never will), and
// returns once the 1s grace has passed since the swap.
func (s *sdsAndStatic) rotate(t *testing.T) {
	t.Helper()
	s.write(t, s.v2.CertPEM, s.v2.KeyPEM)
	rotated := time.Now()
	want := pki.Fingerprint(s.v2.Cert)
	waitFor(t, "the SDS Envoy to serve v2", 30*time.Second, func() (bool, string) {
		got := served(t, s.sds.ListenerAddr(t, "https"))
		return got == want, got
	})
	t.Logf("Envoy %s: file-based SDS served the new leaf %s after the swap", s.sds.Version(), time.Since(rotated).Round(10*time.Millisecond))
	time.Sleep(time.Until(rotated.Add(1500 * time.Millisecond))) // past the 1s grace
}

// TestFileSDSConvergesStaticGoesStale is the core story: one Secret rotation, two Envoys. The
// file-based SDS Envoy converges and certdrift says so; the static one keeps the old leaf and
// certdrift reports STALE_LOADED and STALE_SERVED with both fingerprints.
func TestFileSDSConvergesStaticGoesStale(t *testing.T) {
	s := newSDSAndStatic(t)
	cfg := s.config(t, "", "")

	code, r := auditJSON(t, cfg)
	if code != 0 || len(r.Findings) != 0 {
		t.Fatalf("before rotation: exit %d, want a clean audit:%s", code, describe(r))
	}
	if r.Summary.Bindings != 2 || r.Summary.Handshakes != 2 {
		t.Errorf("before rotation: %d bindings and %d handshakes, want 2 and 2:%s", r.Summary.Bindings, r.Summary.Handshakes, describe(r))
	}

	s.rotate(t)
	want := pki.Fingerprint(s.v2.Cert)

	code, r = auditJSON(t, cfg)
	if code != 1 {
		t.Errorf("after rotation: exit %d, want 1 (findings):%s", code, describe(r))
	}
	byCode := codes(r)
	for _, c := range []audit.Code{audit.StaleLoaded, audit.StaleServed} {
		fs := byCode[c]
		if len(fs) != 1 || fs[0].Subject.Envoy != "static" {
			t.Errorf("want exactly one %s, on the static Envoy; got %d:%s", c, len(fs), describe(r))
			continue
		}
		if fs[0].Evidence["desired_fingerprint_sha256"] != want {
			t.Errorf("%s evidence desired fingerprint = %q, want v2 %q", c, fs[0].Evidence["desired_fingerprint_sha256"], want)
		}
	}
	if fs := byCode[audit.StaleServed]; len(fs) == 1 && fs[0].Evidence["served_fingerprint_sha256"] != pki.Fingerprint(s.v1.Cert) {
		t.Errorf("STALE_SERVED evidence served fingerprint = %q, want v1", fs[0].Evidence["served_fingerprint_sha256"])
	}
	for _, b := range r.Bindings {
		want := map[string]string{"sds": audit.StateConverged, "static": audit.StateStale}[b.Envoy]
		if b.State != want {
			t.Errorf("binding on %s is %s, want %s", b.Envoy, b.State, want)
		}
	}
	if len(r.Findings) != 2 {
		t.Errorf("want only the two stale findings:%s", describe(r))
	}
	checkNoKeys(t, s.keys...)
}

// TestInvalidKeyPairKeepsOldCertificate swaps in a certificate with a key that does not match it.
// Envoy keeps serving the old pair; certdrift reports the broken Secret (KEY_MISMATCH), Envoy's
// rejection (ROTATION_FAILED) and the resulting staleness.
func TestInvalidKeyPairKeepsOldCertificate(t *testing.T) {
	w := newWorld(t)
	v1, v2, stranger := w.leaf(t, "v1"), w.leaf(t, "v2"), w.leaf(t, "stranger")
	w.write(t, v1.CertPEM, v1.KeyPEM)
	sds := w.startSDS(t)
	cfg := writeConfig(t, fmt.Sprintf(`desired:
  - name: web
    dir: %s
envoys:%s
policy:
  grace: 1s
`, w.secretDir, envoyEntry(t, "sds", sds)))

	w.write(t, v2.CertPEM, stranger.KeyPEM)
	rotated := time.Now()
	var r audit.Report
	var code int
	waitFor(t, "certdrift to report the failed rotation", 30*time.Second, func() (bool, string) {
		if time.Since(rotated) < 1500*time.Millisecond {
			return false, "inside grace"
		}
		code, r = auditJSON(t, cfg)
		c := codes(r)
		return len(c[audit.RotationFailed]) > 0, describe(r)
	})
	if got := served(t, sds.ListenerAddr(t, "https")); got != pki.Fingerprint(v1.Cert) {
		t.Errorf("Envoy should keep serving v1 after a bad update; serves %s", got)
	}
	byCode := codes(r)
	for _, c := range []audit.Code{audit.KeyMismatch, audit.RotationFailed, audit.StaleLoaded, audit.StaleServed} {
		if len(byCode[c]) == 0 {
			t.Errorf("want %s:%s", c, describe(r))
		}
	}
	if f := byCode[audit.RotationFailed]; len(f) > 0 && f[0].Severity != audit.Critical {
		t.Errorf("ROTATION_FAILED severity %s, want critical while the old certificate is loaded", f[0].Severity)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	checkNoKeys(t, w.keys...)
}
