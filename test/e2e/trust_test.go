package e2e

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

// TestStaticTrustGoesStaleSDSTrustConverges is seed 003 on real Envoys: one Secret volume whose
// ca.crt rotates to a new CA. One Envoy reads it as a static validation context (trusted_ca
// filename), which Envoy never reloads; the other as a file-based SDS validation context watching
// the volume. certdrift must bind both trusts to the desired bundle, report the static one as
// STALE_TRUST (a warning while the bundle still holds the old CA too, critical once the old CA is
// gone), and the SDS one as converged.
func TestStaticTrustGoesStaleSDSTrustConverges(t *testing.T) {
	w := newWorld(t)
	ca2 := certs.NewCA(t, certs.WithCommonName("e2e-ca-2"))
	spare := certs.NewCA(t, certs.WithCommonName("e2e-ca-spare"))
	server := w.leaf(t, "server")
	project := func(bundle ...[]byte) {
		t.Helper()
		w.keys = append(w.keys, server.KeyPEM)
		if err := atomicdir.Write(w.secretDir, map[string][]byte{"tls.crt": server.CertPEM, "tls.key": server.KeyPEM, "ca.crt": bytes.Join(bundle, nil)}); err != nil {
			t.Fatalf("project secret: %v", err)
		}
	}
	// Two CAs from the start: /certs shows only the first CA of the file Envoy read, and the
	// static Envoy is converged only if that is what certdrift compares it with.
	project(w.ca.CertPEM, spare.CertPEM)
	crt, key, ca := filepath.Join(w.secretDir, "tls.crt"), filepath.Join(w.secretDir, "tls.key"), filepath.Join(w.secretDir, "ca.crt")

	static := envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.Bootstrap(envoytest.Listener{Chains: []envoytest.Chain{{
		CertFile: crt, KeyFile: key, ClientCAFile: ca}}})})
	sdsDir := t.TempDir()
	certSDS, caSDS := filepath.Join(sdsDir, "cert.json"), filepath.Join(sdsDir, "ca.json")
	if err := envoytest.WriteSDSFile(certSDS, envoytest.TLSSecret("web_cert", crt, key, w.secretDir)); err != nil {
		t.Fatal(err)
	}
	if err := envoytest.WriteSDSFile(caSDS, envoytest.ValidationSecret("web_ca", ca, w.secretDir)); err != nil {
		t.Fatal(err)
	}
	sds := envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.Bootstrap(envoytest.Listener{Chains: []envoytest.Chain{{
		SDS:         &envoytest.SDSRef{Name: "web_cert", Path: certSDS, WatchedDir: w.secretDir},
		ClientCASDS: &envoytest.SDSRef{Name: "web_ca", Path: caSDS, WatchedDir: w.secretDir}}}})})

	cfg := writeConfig(t, fmt.Sprintf(`desired:
  - name: web
    dir: %s
envoys:%s%s
policy:
  grace: 1s
`, w.secretDir, envoyEntry(t, "sds", sds), envoyEntry(t, "static", static)))

	trust := func(r audit.Report) map[string]string {
		out := map[string]string{}
		for _, b := range r.Bindings {
			if b.Trust {
				out[b.Envoy] = b.State
			}
		}
		return out
	}
	code, r := auditJSON(t, cfg)
	if code != 0 || len(r.Findings) != 0 {
		t.Fatalf("before rotation: exit %d, want a clean audit:%s", code, describe(r))
	}
	if got := trust(r); got["sds"] != audit.StateConverged || got["static"] != audit.StateConverged {
		t.Fatalf("before rotation: trust bindings %v, want both converged:%s", got, describe(r))
	}

	for _, phase := range []struct {
		name   string
		bundle [][]byte
		sev    audit.Severity
	}{
		{"bundle [new, old]", [][]byte{ca2.CertPEM, w.ca.CertPEM}, audit.Warning},
		{"bundle [new]", [][]byte{ca2.CertPEM}, audit.Critical},
	} {
		project(phase.bundle...)
		rotated := time.Now()
		waitFor(t, phase.name+": the SDS Envoy's trust to converge and the static one's to be stale", 30*time.Second, func() (bool, string) {
			if time.Since(rotated) < 1500*time.Millisecond {
				return false, "inside grace"
			}
			code, r = auditJSON(t, cfg)
			got := trust(r)
			return got["sds"] == audit.StateConverged && got["static"] == audit.StateStale, fmt.Sprint(got) + describe(r)
		})
		stale := codes(r)[audit.StaleTrust]
		if len(stale) != 1 || stale[0].Subject.Envoy != "static" || stale[0].Subject.Source != "web" {
			t.Fatalf("%s: want one STALE_TRUST, on the static Envoy for source web:%s", phase.name, describe(r))
		}
		if stale[0].Severity != phase.sev || code != 1 {
			t.Errorf("%s: STALE_TRUST %s, exit %d; want %s and exit 1", phase.name, stale[0].Severity, code, phase.sev)
		}
		if !strings.Contains(stale[0].Evidence["loaded_serials"], fmt.Sprintf("%x", w.ca.Cert.SerialNumber)) {
			t.Errorf("%s: STALE_TRUST evidence loaded_serials = %q, want the old CA's %x among them", phase.name, stale[0].Evidence["loaded_serials"], w.ca.Cert.SerialNumber)
		}
		t.Logf("Envoy %s, %s: static trust %s, SDS trust converged", static.Version(), phase.name, stale[0].Severity)
	}
	checkNoKeys(t, w.keys...)
}
