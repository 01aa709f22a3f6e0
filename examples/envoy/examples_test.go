// Package envoyexamples keeps the example Envoy configurations of examples/envoy true: each test
// runs the real Envoy on an example's envoy.yaml, with freshly minted certificates written where
// the example expects them (kubelet-style volumes under /etc/…, moved into a temporary
// directory), and runs the real `certdrift audit` with the example's certdrift.yaml against it.
//
// The examples are the files a user copies, so they keep their real-looking paths and ports; the
// test rewrites them (rewriteEnvoy, rewriteCertdrift) and fails when a rewrite no longer matches,
// so an edited example cannot silently run with the wrong files.
package envoyexamples

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

const host = "www.example.com"

// grace replaces the examples' policy.grace (2m, sized for the kubelet) so a rotation becomes
// drift within the test.
const grace = 2 * time.Second

var certdriftBin string

func TestMain(m *testing.M) { cdbin.Main(m, &certdriftBin) }

// example is one example directory set up in a temporary root.
type example struct {
	dir  string // examples/envoy/<name>
	root string // stands for "/": the example's /etc/... paths live under it
}

func newExample(t *testing.T, name string) *example {
	t.Helper()
	if _, err := os.Stat(filepath.Join(name, "envoy.yaml")); err != nil {
		t.Fatalf("example %s: %v", name, err)
	}
	return &example{dir: name, root: t.TempDir()}
}

// path is where the example's absolute path p lives in the test.
func (x *example) path(p string) string { return filepath.Join(x.root, p) }

// volume writes files into the example's directory p the way the kubelet projects a Secret or
// ConfigMap volume (..data symlink swap), so a second call is a rotation.
func (x *example) volume(t *testing.T, p string, files map[string][]byte) {
	t.Helper()
	if err := atomicdir.Write(x.path(p), files); err != nil {
		t.Fatalf("write volume %s: %v", p, err)
	}
}

// replace applies each old→new pair to s, failing when one matches nothing: the example changed
// and the rewrite must follow it.
func replace(t *testing.T, file, s string, pairs ...string) string {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("%s no longer contains %q: update the rewrite in examples_test.go with the example", file, pairs[i])
		}
		s = strings.ReplaceAll(s, pairs[i], pairs[i+1])
	}
	return s
}

func (x *example) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(x.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rewriteEnvoy turns an example's file for Envoy into one for this test: /etc/ paths into the
// temporary root, the admin onto an ephemeral port (the harness learns it), the listener onto
// loopback and a port allocated by the harness (the mtls example's cluster dials it too).
func (x *example) rewriteEnvoy(t *testing.T, name string) string {
	t.Helper()
	s := replace(t, filepath.Join(x.dir, name), x.read(t, name), "/etc/", x.root+"/etc/")
	if name != "envoy.yaml" {
		return s
	}
	return replace(t, filepath.Join(x.dir, name), s,
		"{address: 127.0.0.1, port_value: 9901}", "{address: 127.0.0.1, port_value: 0}",
		"{address: 0.0.0.0, port_value: 8443}", `{address: 127.0.0.1, port_value: {{port "https"}}}`,
	)
}

// start runs the real Envoy on the example's envoy.yaml; the certificates must be in place.
func (x *example) start(t *testing.T) (*envoytest.Envoy, string) {
	t.Helper()
	bootstrap := x.rewriteEnvoy(t, "envoy.yaml")
	if strings.Contains(bootstrap, "port_value: 8443") {
		// The mtls example's cluster dials the listener: same port.
		bootstrap = strings.ReplaceAll(bootstrap, "port_value: 8443", `port_value: {{port "https"}}`)
	}
	e := envoytest.Start(t, envoytest.Config{Bootstrap: bootstrap})
	return e, fmt.Sprintf("127.0.0.1:%d", e.Ports["https"])
}

// config writes the example's certdrift.yaml pointed at this test's Envoy and files.
func (x *example) config(t *testing.T, e *envoytest.Envoy, listener string, edit ...string) string {
	t.Helper()
	s := replace(t, filepath.Join(x.dir, "certdrift.yaml"), x.read(t, "certdrift.yaml"),
		"/etc/", x.root+"/etc/",
		"http://127.0.0.1:9901", e.AdminURL,
		"127.0.0.1:8443", listener,
	)
	s = replace(t, filepath.Join(x.dir, "certdrift.yaml"), s, edit...)
	p := filepath.Join(t.TempDir(), "certdrift.yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runAudit runs `certdrift audit --config cfg -o json` and decodes the report.
func runAudit(t *testing.T, cfg string) (int, audit.Report) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := cdbin.Run(ctx, certdriftBin, os.Environ(), "audit", "--config", cfg, "-o", "json", "--grace", grace.String())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.Stdout+r.Stderr, "PRIVATE KEY") {
		t.Errorf("certdrift printed private key material")
	}
	var rep audit.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("certdrift audit exit %d, stdout is not a JSON report: %v\n%s", r.Code, err, r.Output())
	}
	return r.Code, rep
}

// assertClean wants exit 0, no findings, every binding converged and full coverage.
func assertClean(t *testing.T, when string, code int, r audit.Report, wantBindings int) {
	t.Helper()
	var problems []string
	if code != 0 {
		problems = append(problems, fmt.Sprintf("exit code %d, want 0", code))
	}
	for _, f := range r.Findings {
		problems = append(problems, fmt.Sprintf("finding %s %s: %s", f.Severity, f.Code, f.Message))
	}
	if len(r.Bindings) != wantBindings {
		problems = append(problems, fmt.Sprintf("%d bindings, want %d: %+v", len(r.Bindings), wantBindings, r.Bindings))
	}
	for _, b := range r.Bindings {
		if b.State != "converged" {
			problems = append(problems, fmt.Sprintf("binding %s ← %s (%s%s) is %s %s", b.Envoy, b.Source, b.Secret, b.File, b.State, b.Reason))
		}
	}
	c := r.Summary.Coverage
	if c.BindingsJudged != c.Bindings || c.HandshakesJudged != c.Handshakes || c.Handshakes == 0 {
		problems = append(problems, fmt.Sprintf("coverage %+v, want everything judged and at least one handshake", c))
	}
	if len(problems) > 0 {
		t.Errorf("%s: want a clean audit:\n  %s", when, strings.Join(problems, "\n  "))
	}
}

func codes(r audit.Report) map[audit.Code]bool {
	m := map[audit.Code]bool{}
	for _, f := range r.Findings {
		m[f.Code] = true
	}
	return m
}

// served is the fingerprint of the leaf addr serves for host, verified against ca.
func served(addr string, ca *certs.Authority) (string, error) {
	d := &tls.Dialer{Config: &tls.Config{ServerName: host, RootCAs: certs.Pool(ca)}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return pki.Fingerprint(c.(*tls.Conn).ConnectionState().PeerCertificates[0]), nil
}

func waitServed(t *testing.T, addr string, ca *certs.Authority, want *x509.Certificate, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		fp, err := served(addr, ca)
		if err == nil && fp == pki.Fingerprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not serve %s within %v (last: %s, %v)", addr, want.Subject.CommonName, timeout, fp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func secret(ca *certs.Authority, l *certs.Leaf) map[string][]byte {
	return map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM, "ca.crt": ca.CertPEM}
}

// TestStaticTLS: clean at first; after the Secret volume rotates, the static context keeps the
// old certificate and certdrift says so in the loaded and the served view.
func TestStaticTLS(t *testing.T) {
	x := newExample(t, "static-tls")
	ca := certs.NewCA(t, certs.WithCommonName("example-ca"))
	v1 := ca.Leaf(t, certs.WithCommonName(host+" v1"), certs.WithDNSNames(host), certs.WithFreshKey())
	v2 := ca.Leaf(t, certs.WithCommonName(host+" v2"), certs.WithDNSNames(host), certs.WithFreshKey())
	x.volume(t, "/etc/envoy/tls", secret(ca, v1))
	e, listener := x.start(t)
	cfg := x.config(t, e, listener)

	code, r := runAudit(t, cfg)
	assertClean(t, "before the rotation", code, r, 1)

	x.volume(t, "/etc/envoy/tls", secret(ca, v2))
	time.Sleep(grace + time.Second)
	waitServed(t, listener, ca, v1.Cert, time.Second) // the point of the example: still v1

	code, r = runAudit(t, cfg)
	got := codes(r)
	if code != 1 || !got[audit.StaleLoaded] || !got[audit.StaleServed] {
		t.Errorf("after the rotation: exit %d, findings %v; want exit 1 with %s and %s", code, got, audit.StaleLoaded, audit.StaleServed)
	}
	for _, b := range r.Bindings {
		if b.State != "stale" {
			t.Errorf("after the rotation: binding %s ← %s is %s, want stale", b.Envoy, b.Source, b.State)
		}
	}
}

// TestFileSDS: the recommended setup converges by itself. Its control is TestStaticTLS: the same
// rotation there is drift.
func TestFileSDS(t *testing.T) {
	x := newExample(t, "file-sds")
	ca := certs.NewCA(t, certs.WithCommonName("example-ca"))
	v1 := ca.Leaf(t, certs.WithCommonName(host+" v1"), certs.WithDNSNames(host), certs.WithFreshKey())
	v2 := ca.Leaf(t, certs.WithCommonName(host+" v2"), certs.WithDNSNames(host), certs.WithFreshKey())
	x.volume(t, "/etc/envoy/tls", secret(ca, v1))
	// The SDS file ships in a ConfigMap volume at /etc/envoy/sds.
	x.volume(t, "/etc/envoy/sds", map[string][]byte{"web_cert.yaml": []byte(x.rewriteEnvoy(t, "web_cert.yaml"))})
	e, listener := x.start(t)
	cfg := x.config(t, e, listener)

	code, r := runAudit(t, cfg)
	assertClean(t, "before the rotation", code, r, 1)
	if len(r.Bindings) == 1 && r.Bindings[0].Secret != "web_cert" {
		t.Errorf("binding %+v, want the SDS secret web_cert bound through its watched_directory", r.Bindings[0])
	}

	x.volume(t, "/etc/envoy/tls", secret(ca, v2))
	rotated := time.Now()
	waitServed(t, listener, ca, v2.Cert, 30*time.Second)
	time.Sleep(time.Until(rotated.Add(grace + time.Second)))

	code, r = runAudit(t, cfg)
	assertClean(t, "after the rotation", code, r, 1)
}

// TestMTLS: the listener requires a client certificate from the client CA; certdrift's handshake
// presents one and judges the served leaf; the cluster's client certificate is accepted by the
// listener (GET /upstream goes out through it and back in).
func TestMTLS(t *testing.T) {
	x := newExample(t, "mtls")
	serverCA := certs.NewCA(t, certs.WithCommonName("example-server-ca"))
	clientCA := certs.NewCA(t, certs.WithCommonName("example-client-ca"))
	web := serverCA.Leaf(t, certs.WithCommonName(host), certs.WithDNSNames(host))
	upstream := clientCA.Leaf(t, certs.WithCommonName("edge upstream client"), certs.WithClientAuth())
	prober := clientCA.Leaf(t, certs.WithCommonName("certdrift"), certs.WithClientAuth())
	x.volume(t, "/etc/envoy/tls", secret(serverCA, web))
	x.volume(t, "/etc/envoy/client-ca", map[string][]byte{"ca.crt": clientCA.CertPEM})
	x.volume(t, "/etc/envoy/upstream-tls", secret(clientCA, upstream))
	x.volume(t, "/etc/envoy/upstream-ca", map[string][]byte{"ca.crt": serverCA.CertPEM})
	x.volume(t, "/etc/certdrift/client", map[string][]byte{"tls.crt": prober.CertPEM, "tls.key": prober.KeyPEM})
	e, listener := x.start(t)

	// The example does what it says, checked without certdrift first. (With TLS 1.3 the client's
	// handshake completes before the server has checked its certificate: the refusal comes with
	// the first read, so the control is a request, not a dial.)
	if body, err := get(listener, "/", serverCA, nil); err == nil {
		t.Errorf("GET / without a client certificate answered %q: the listener must require one", body)
	}
	for _, path := range []string{"/", "/upstream"} {
		body, err := get(listener, path, serverCA, prober)
		if err != nil || !strings.Contains(body, "hello from mtls") {
			t.Errorf("GET %s with a client certificate: %q, %v", path, body, err)
		}
	}
	if n := e.Counters(t)["cluster.backend.ssl.handshake"]; n == 0 {
		t.Errorf("cluster.backend.ssl.handshake = 0: GET /upstream did not go through the cluster's mTLS")
	}

	// certdrift's handshake must present the client certificate: the listener's count of clients
	// refused for having none (1 so far, the control above) must not move.
	noCert := envoytest.ListenerStatPrefix("127.0.0.1", e.Ports["https"]) + ".ssl.fail_verify_no_cert"
	before := e.Counters(t)[noCert]
	if before != 1 {
		t.Errorf("%s = %d after one request without a client certificate, want 1", noCert, before)
	}
	code, r := runAudit(t, x.config(t, e, listener))
	if after := e.Counters(t)[noCert]; after != before {
		t.Errorf("%s went from %d to %d during certdrift audit: its handshake sent no client certificate", noCert, before, after)
	}
	// The listener's certificate, the upstream client certificate, and the two CA bundles Envoy
	// loaded (trust bindings), each bound by its file path.
	assertClean(t, "mTLS", code, r, 4)

	// Control: a client CA bundle that cannot verify the upstream client certificate breaks the
	// declared pairing.
	other := certs.NewCA(t, certs.WithCommonName("other-ca"))
	x.volume(t, "/etc/envoy/client-ca", map[string][]byte{"ca.crt": other.CertPEM})
	code, r = runAudit(t, x.config(t, e, listener))
	if code == 0 || !codes(r)[audit.CABundleGap] {
		t.Errorf("client CA bundle replaced by an unrelated CA: exit %d, findings %v; want %s", code, codes(r), audit.CABundleGap)
	}
}

// get is an HTTPS GET, with a client certificate unless client is nil.
func get(addr, path string, ca *certs.Authority, client *certs.Leaf) (string, error) {
	cfg := &tls.Config{ServerName: host, RootCAs: certs.Pool(ca)}
	if client != nil {
		cfg.Certificates = []tls.Certificate{client.TLSCertificate()}
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("https://" + addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("status %s", resp.Status)
	}
	return string(b), err
}
