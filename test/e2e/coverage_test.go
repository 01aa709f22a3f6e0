package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

// TestMTLSBundleLacksRotatedClientIssuer: an mTLS listener trusts only CA1, and the client's leaf
// was re-issued by CA2. The declared pairing makes certdrift report CA_BUNDLE_GAP, and the real
// Envoy indeed rejects that client.
func TestMTLSBundleLacksRotatedClientIssuer(t *testing.T) {
	w := newWorld(t)
	server := w.leaf(t, "server")
	ca2 := certs.NewCA(t, certs.WithCommonName("e2e-ca-2"))
	client := ca2.Leaf(t, certs.WithCommonName("client"), certs.WithClientAuth(), certs.WithFreshKey())
	w.keys = append(w.keys, server.KeyPEM, client.KeyPEM)
	dir := t.TempDir()
	certs.WriteFiles(t, dir, map[string][]byte{
		"server.crt": server.CertPEM, "server.key": server.KeyPEM, "trust.crt": w.ca.CertPEM,
		"client.crt": client.CertPEM, "client.key": client.KeyPEM,
	})
	p := func(n string) string { return filepath.Join(dir, n) }
	// A gap that opened within the grace period is the window of a rotation (warning); these
	// files are dated ten minutes back, a gap that stayed: critical.
	old := time.Now().Add(-10 * time.Minute)
	for _, n := range []string{"server.crt", "server.key", "trust.crt", "client.crt", "client.key"} {
		if err := os.Chtimes(p(n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	e := envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.Bootstrap(envoytest.Listener{Chains: []envoytest.Chain{{
		CertFile: p("server.crt"), KeyFile: p("server.key"), ClientCAFile: p("trust.crt"), RequireClientCert: true}}})})

	cfg := writeConfig(t, fmt.Sprintf(`desired:
  - name: listener-trust
    ca_file: %s
  - name: client
    cert_file: %s
    key_file: %s
pairings:
  - name: listener-trusts-client
    bundle: {source: listener-trust}
    leaf: {source: client}
envoys:
  - name: mtls
    admin: %s
    endpoints:
      - address: %s
        sni: [%s]
        client_cert: {cert_file: %s, key_file: %s}
`, p("trust.crt"), p("client.crt"), p("client.key"), e.AdminURL, e.ListenerAddr(t, "https"), host, p("client.crt"), p("client.key")))

	code, r := auditJSON(t, cfg)
	gaps := codes(r)[audit.CABundleGap]
	if len(gaps) != 1 || gaps[0].Subject.Source != "client" {
		t.Fatalf("want one CA_BUNDLE_GAP about the client leaf:%s", describe(r))
	}
	if gaps[0].Severity != audit.Critical || code != 1 {
		t.Errorf("CA_BUNDLE_GAP severity %s exit %d, want critical and 1", gaps[0].Severity, code)
	}
	checkNoKeys(t, w.keys...)
}

// TestUnreachableIsReportedWithinDeadline: an admin port nobody listens on and a TLS port that
// accepts and never answers become UNREACHABLE findings within the timeout, and the rest of the
// audit (a healthy Envoy beside them) still completes.
func TestUnreachableIsReportedWithinDeadline(t *testing.T) {
	w := newWorld(t)
	v1 := w.leaf(t, "v1")
	w.write(t, v1.CertPEM, v1.KeyPEM)
	healthy := w.startSDS(t)

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // hold the connection open, say nothing
		}
	}()
	closedPort, err := envoytest.FreePort()
	if err != nil {
		t.Fatal(err)
	}

	cfg := writeConfig(t, fmt.Sprintf(`desired:
  - name: web
    dir: %s
envoys:%s
  - name: ghost
    admin: http://127.0.0.1:%d
    endpoints:
      - address: %s
        sni: [%s]
policy:
  timeout: 2s
`, w.secretDir, envoyEntry(t, "healthy", healthy), closedPort, silent.Addr(), host))

	start := time.Now()
	code, r := auditJSON(t, cfg)
	took := time.Since(start)
	// Generous bound: the point is that a silent peer cannot hold the audit hostage, not speed.
	if took > 30*time.Second {
		t.Errorf("audit took %s with a 2s timeout", took)
	}
	un := codes(r)[audit.Unreachable]
	var admin, tlsEP bool
	for _, f := range un {
		admin = admin || (f.Subject.Envoy == "ghost" && f.Subject.Endpoint == fmt.Sprintf("http://127.0.0.1:%d", closedPort))
		tlsEP = tlsEP || (f.Subject.Envoy == "ghost" && f.Subject.Endpoint == silent.Addr().String())
	}
	if !admin || !tlsEP || len(un) != 2 {
		t.Errorf("want UNREACHABLE for the ghost admin and the silent TLS port (2 findings):%s", describe(r))
	}
	healthyOK := false
	for _, b := range r.Bindings {
		healthyOK = healthyOK || (b.Envoy == "healthy" && b.State == audit.StateConverged)
	}
	if !healthyOK {
		t.Errorf("the healthy Envoy's binding should still be audited and converged:%s", describe(r))
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	checkNoKeys(t, w.keys...)
}
