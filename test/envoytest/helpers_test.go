package envoytest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
)

// servedLeaf does one TLS handshake to addr and returns the leaf the server sent. The chain is
// not verified: these tests look at what is served, not whether it is trusted.
func servedLeaf(addr, sni string) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 3 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{
		ServerName:         sni,
		InsecureSkipVerify: true, //nolint:gosec // we inspect the served leaf, trust is not the question
	})
	if err != nil {
		return nil, fmt.Errorf("TLS dial %s: %w", addr, err)
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, fmt.Errorf("TLS dial %s: no certificate served", addr)
	}
	return certs[0], nil
}

// waitServed polls until addr serves want (compared by serial and raw bytes) and returns how
// long that took, or fails the test after timeout.
func waitServed(t *testing.T, addr string, want *x509.Certificate, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last *x509.Certificate
	var lastErr error
	for time.Since(start) < timeout {
		got, err := servedLeaf(addr, "")
		if err == nil && got.Equal(want) {
			return time.Since(start)
		}
		last, lastErr = got, err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not serve serial %x within %v: last served %s, last error %v", addr, want.SerialNumber, timeout, describe(last), lastErr)
	return 0
}

// assertServed fails the test unless addr serves want now.
func assertServed(t *testing.T, addr string, want *x509.Certificate, what string) {
	t.Helper()
	got, err := servedLeaf(addr, "")
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !got.Equal(want) {
		t.Fatalf("%s: served %s, want %s", what, describe(got), describe(want))
	}
}

func describe(c *x509.Certificate) string {
	if c == nil {
		return "nothing"
	}
	return fmt.Sprintf("CN=%s serial=%x", c.Subject.CommonName, c.SerialNumber)
}

// kubeletSecret is a Secret volume in the kubelet's layout, holding tls.crt and tls.key.
type kubeletSecret struct {
	Dir string
}

func newKubeletSecret(t *testing.T, leaf *certs.Leaf) kubeletSecret {
	t.Helper()
	s := kubeletSecret{Dir: filepath.Join(t.TempDir(), "secret-volume")}
	s.write(t, leaf.ChainPEM(), leaf.KeyPEM)
	return s
}

// write swaps ..data to a new version holding certPEM and keyPEM, as the kubelet does.
func (s kubeletSecret) write(t *testing.T, certPEM, keyPEM []byte) {
	t.Helper()
	if err := atomicdir.Write(s.Dir, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM}); err != nil {
		t.Fatalf("project secret: %v", err)
	}
}

func (s kubeletSecret) certPath() string { return filepath.Join(s.Dir, "tls.crt") }
func (s kubeletSecret) keyPath() string  { return filepath.Join(s.Dir, "tls.key") }

// writeSDS writes an SDS resource file into a fresh directory and returns its path.
func writeSDS(t *testing.T, name string, data []byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sds")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name+".json")
	if err := WriteSDSFile(p, data); err != nil {
		t.Fatal(err)
	}
	return p
}

func serialHex(l *certs.Leaf) string { return fmt.Sprintf("%x", l.Cert.SerialNumber) }

func hexes(ns []*big.Int) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, fmt.Sprintf("%x", n))
	}
	return out
}

// certsPaths returns the leaf "path" of every /certs context.
func certsPaths(t *testing.T, e *Envoy) []string {
	t.Helper()
	var doc struct {
		Certificates []struct {
			CertChain []struct {
				Path string `json:"path"`
			} `json:"cert_chain"`
		} `json:"certificates"`
	}
	if err := json.Unmarshal(e.AdminGet(t, "/certs"), &doc); err != nil {
		t.Fatalf("decode /certs: %v", err)
	}
	var out []string
	for _, c := range doc.Certificates {
		if len(c.CertChain) > 0 {
			out = append(out, c.CertChain[0].Path)
		}
	}
	return out
}

// assertDumpedLeaf checks that config_dump's active secret server_cert inlines want's leaf with
// the key redacted.
func assertDumpedLeaf(t *testing.T, e *Envoy, want *certs.Leaf, when string) {
	t.Helper()
	secrets := dumpedSecrets(t, e, "dynamic_active_secrets")
	if len(secrets) != 1 || secrets[0].Name != "server_cert" {
		t.Fatalf("config_dump %s: got %d active secrets %+v, want just server_cert", when, len(secrets), secrets)
	}
	s := secrets[0]
	if s.Leaf == nil || !s.Leaf.Equal(want.Cert) {
		t.Errorf("config_dump %s: secret server_cert inlines %s, want %s", when, describe(s.Leaf), describe(want.Cert))
	}
	if !s.KeyRedacted {
		t.Errorf("config_dump %s: private key of server_cert is not \"[redacted]\"", when)
	}
}

// counterDiff lists the SDS/TLS-context related stats that differ, "name a->b", sorted. Traffic
// and log-flush stats are left out: they change with every probe.
func counterDiff(before, after map[string]uint64) string {
	var out []string
	for name, v := range after {
		if before[name] == v || !interesting(name) {
			continue
		}
		out = append(out, fmt.Sprintf("%s %d->%d", name, before[name], v))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "(none)"
	}
	return strings.Join(out, ", ")
}

func interesting(name string) bool {
	if strings.HasSuffix(name, ".update_time") || strings.HasSuffix(name, ".version") {
		return false
	}
	for _, s := range []string{"sds.", "ssl_context", "secret", "rotation", "cert"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// writeBundle projects a ca.crt into dir in the kubelet layout (a ConfigMap or Secret volume).
func writeBundle(t *testing.T, dir string, bundle []byte) {
	t.Helper()
	if err := atomicdir.Write(dir, map[string][]byte{"ca.crt": bundle}); err != nil {
		t.Fatalf("project bundle: %v", err)
	}
}

// mtlsGet makes one HTTPS request to addr presenting client (nil: no client certificate) and
// trusting serverCA. With TLS 1.3 a rejected client certificate only shows on the first read,
// hence a full request rather than a bare handshake.
func mtlsGet(addr string, client *certs.Leaf, serverCA *certs.Authority) error {
	cfg := &tls.Config{RootCAs: certs.Pool(serverCA), ServerName: "app.test"}
	if client != nil {
		// Always present the certificate. With Certificates, Go sends nothing when the
		// server's list of acceptable CAs (Envoy sends its trusted CA names) lacks the
		// client's issuer, and Envoy would then see "no certificate" instead of a bad one.
		cert := client.TLSCertificate()
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := c.Get("https://" + addr + "/")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16)); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET https://%s/: %s", addr, resp.Status)
	}
	return nil
}
