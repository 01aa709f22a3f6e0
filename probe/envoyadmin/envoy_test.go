package envoyadmin

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

// TestSnapshotRealEnvoy runs the real Envoy chosen by test/envoytest (CERTDRIFT_ENVOY_VERSION etc.)
// with a file-SDS chain and a static chain, takes a Snapshot, rotates the SDS certificate the way
// the kubelet does, and checks that the next Snapshot sees the new serial everywhere.
func TestSnapshotRealEnvoy(t *testing.T) {
	ca := certs.NewCA(t)
	leaf1 := ca.Leaf(t, certs.WithDNSNames("sds.example.com"))
	static := ca.Leaf(t, certs.WithDNSNames("static.example.com"))
	dir := t.TempDir()
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	certs.WriteFiles(t, certDir, map[string][]byte{"tls.crt": leaf1.CertPEM, "tls.key": leaf1.KeyPEM})
	certs.WriteFiles(t, dir, map[string][]byte{
		"ca.crt": ca.CertPEM, "static.crt": static.CertPEM, "static.key": static.KeyPEM,
	})
	const certName, caName = "kubernetes://default/sds-cert", "kubernetes://default/sds-ca"
	sdsCert := filepath.Join(dir, "cert.json")
	sdsCA := filepath.Join(dir, "ca.json")
	mustWrite(t, sdsCert, envoytest.TLSSecret(certName, filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"), certDir))
	mustWrite(t, sdsCA, envoytest.ValidationSecret(caName, filepath.Join(dir, "ca.crt"), ""))

	e := envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.Bootstrap(envoytest.Listener{
		Chains: []envoytest.Chain{
			{
				Name: "sds", ServerNames: []string{"sds.example.com"},
				SDS:         &envoytest.SDSRef{Name: certName, Path: sdsCert, WatchedDir: certDir},
				ClientCASDS: &envoytest.SDSRef{Name: caName, Path: sdsCA},
			},
			{
				Name: "static", ServerNames: []string{"static.example.com"},
				CertFile: filepath.Join(dir, "static.crt"), KeyFile: filepath.Join(dir, "static.key"),
				ClientCAFile: filepath.Join(dir, "ca.crt"), RequireClientCert: true,
			},
		},
	})})

	// Through a Memo, as every round of serve reads it: the rotation below must still be seen.
	var memo Memo
	paths := &pathCounter{}
	c, err := New(e.AdminURL, Options{Timeout: 10 * time.Second, Memo: &memo, HTTPClient: &http.Client{Transport: paths}})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Snapshot(context.Background())
	for what, err := range map[string]error{"certs": s.CertsErr, "config": s.ConfigErr, "stats": s.StatsErr, "server_info": s.ServerInfoErr} {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if s.ServerVersion != e.Version() {
		t.Errorf("ServerVersion %q, binary says %q", s.ServerVersion, e.Version())
	}
	if len(s.ConfigSkipped) != 0 {
		t.Errorf("skipped config entries: %v", s.ConfigSkipped)
	}

	// SNI -> where the certificate comes from.
	bySNI := map[string]envoystate.FilterChainTLS{}
	for _, fc := range s.Listeners {
		for _, n := range fc.ServerNames {
			bySNI[n] = fc
		}
	}
	if fc := bySNI["sds.example.com"]; len(fc.SDSCertNames) != 1 || fc.SDSCertNames[0] != certName || fc.SDSValidationName != caName {
		t.Errorf("sds.example.com chain = %+v, want SDS %q validated by %q", fc, certName, caName)
	}
	if fc := bySNI["static.example.com"]; len(fc.CertFiles) != 1 || fc.CertFiles[0] != filepath.Join(dir, "static.crt") || !fc.RequireClientCert {
		t.Errorf("static.example.com chain = %+v, want the static file and mTLS", fc)
	}

	checkLoaded(t, s, certName, leaf1.Cert.SerialNumber.Text(16))

	// Nothing changed: the second read parses nothing again and does not ask for /server_info.
	hits0, _ := memo.Counts()
	again := c.Snapshot(context.Background())
	if hits, misses := memo.Counts(); hits-hits0 != 3 { // /certs and the two config_dump masks
		t.Errorf("unchanged admin read again: %d memo hits (%d misses), want 3", hits-hits0, misses)
	}
	if n := paths.count("/server_info"); n != 1 {
		t.Errorf("/server_info read %d times in two snapshots of one Envoy process, want 1", n)
	}
	if again.ServerVersion != s.ServerVersion || !again.ServerStart.Equal(s.ServerStart) || again.ServerInfoErr != nil {
		t.Errorf("second snapshot: version %q start %v (err %v), want %q %v", again.ServerVersion, again.ServerStart, again.ServerInfoErr,
			s.ServerVersion, s.ServerStart)
	}
	checkLoaded(t, again, certName, leaf1.Cert.SerialNumber.Text(16))
	if _, ok := s.Stats.KeyRotationFailed()[envoystate.SanitizeStatName(certName)]; !ok {
		t.Errorf("no key_rotation_failed for %q in %v", certName, s.Stats.Counters)
	}

	// Rotate as the kubelet does: new files in a fresh directory, then one rename into the
	// watched directory (here: replace the files and move a marker in).
	leaf2 := ca.Leaf(t, certs.WithDNSNames("sds.example.com"))
	tmp := filepath.Join(dir, "next")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	certs.WriteFiles(t, tmp, map[string][]byte{"tls.crt": leaf2.CertPEM, "tls.key": leaf2.KeyPEM})
	for _, f := range []string{"tls.key", "tls.crt"} {
		if err := os.Rename(filepath.Join(tmp, f), filepath.Join(certDir, f)); err != nil {
			t.Fatal(err)
		}
	}
	want := leaf2.Cert.SerialNumber.Text(16)
	deadline := time.Now().Add(20 * time.Second)
	for {
		s = c.Snapshot(context.Background())
		if loadedSerial(s, certName) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Envoy did not load the rotated certificate %s within 20s (config_dump has %s)\n%s", want, loadedSerial(s, certName), e.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkLoaded(t, s, certName, want)
	if u := s.Stats.SDSUpdates()[envoystate.SanitizeStatName(certName)]; u.Success < 1 || u.LastUpdate.IsZero() {
		t.Errorf("SDS updates after rotation = %+v", u)
	}
}

// pathCounter is a transport that counts the requests made per path.
type pathCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *pathCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[r.URL.Path]++
	p.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (p *pathCounter) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[path]
}

func mustWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := envoytest.WriteSDSFile(path, b); err != nil {
		t.Fatal(err)
	}
}

func loadedSerial(s *envoystate.Snapshot, name string) string {
	for _, sec := range s.Secrets {
		if sec.Name == name && len(sec.Chain) > 0 {
			return pki.SerialHex(sec.Chain[0].SerialNumber)
		}
	}
	return ""
}

// checkLoaded asserts that config_dump and /certs both show serial for the SDS secret.
func checkLoaded(t *testing.T, s *envoystate.Snapshot, name, serial string) {
	t.Helper()
	if got := loadedSerial(s, name); got != serial {
		t.Errorf("config_dump secret %q serial %q, want %q", name, got, serial)
	}
	found := false
	for _, ctx := range s.Contexts {
		for _, d := range ctx.Chain {
			if d.Serial != nil && d.Serial.Text(16) == serial {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("/certs has no leaf with serial %s", serial)
	}
	for _, sec := range s.Secrets {
		if sec.Name == name && (!sec.KeyRedacted || sec.KeyFile != "") {
			t.Errorf("secret %q: KeyRedacted=%v KeyFile=%q; Envoy should redact the key", name, sec.KeyRedacted, sec.KeyFile)
		}
	}
}
