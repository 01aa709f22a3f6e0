package e2e

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

// TestCodesAgainstRealEnvoy builds, with one real Envoy serving several listeners, each situation
// behind the finding codes not covered by the rotation tests, and checks certdrift names each
// one on the right subject. (STALE_*, KEY_MISMATCH, ROTATION_FAILED, CA_BUNDLE_GAP and UNREACHABLE
// have their own tests.)
func TestCodesAgainstRealEnvoy(t *testing.T) {
	now := time.Now()
	root := certs.NewCA(t, certs.WithCommonName("codes-root"))
	inter := root.Intermediate(t, certs.WithCommonName("codes-intermediate"))
	oldCA := certs.NewCA(t, certs.WithCommonName("retired-ca"), certs.WithValidity(now.Add(-800*24*time.Hour), now.Add(-24*time.Hour)))
	leaf := func(cn string, opts ...certs.Option) *certs.Leaf {
		return root.Leaf(t, append([]certs.Option{certs.WithCommonName(cn), certs.WithDNSNames(cn + ".example.com"), certs.WithFreshKey()}, opts...)...)
	}
	l := map[string]*certs.Leaf{
		"expired": leaf("expired", certs.WithValidity(now.Add(-30*24*time.Hour), now.Add(-time.Hour))),
		"soon":    leaf("soon", certs.WithValidity(now.Add(-30*24*time.Hour), now.Add(3*24*time.Hour))),
		"future":  leaf("future", certs.WithValidity(now.Add(48*time.Hour), now.Add(90*24*time.Hour))),
		"www":     leaf("www"),
		"sha1":    leaf("sha1", certs.WithSignatureAlgorithm(x509.ECDSAWithSHA1)),
	}
	api := inter.Leaf(t, certs.WithCommonName("api"), certs.WithDNSNames("api.example.com"), certs.WithFreshKey())

	dir := t.TempDir()
	files := map[string][]byte{
		"api/chain.crt": api.ChainPEM(), "api/leaf-only.crt": api.CertPEM, "api/tls.key": api.KeyPEM,
		// The trust bundle: the root, a retired CA and the root again.
		"api/ca.crt":     certs.Bundle(root, oldCA, root),
		"broken/tls.crt": []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"),
	}
	var keys [][]byte
	var ls []envoytest.Listener
	for name, c := range l {
		files[name+"/tls.crt"], files[name+"/tls.key"] = c.CertPEM, c.KeyPEM
		keys = append(keys, c.KeyPEM)
		ls = append(ls, envoytest.Listener{Name: name, Chains: []envoytest.Chain{{
			CertFile: filepath.Join(dir, name, "tls.crt"), KeyFile: filepath.Join(dir, name, "tls.key")}}})
	}
	keys = append(keys, api.KeyPEM)
	certs.WriteFiles(t, dir, files)
	// The api listener drops the intermediate: it serves leaf-only.crt.
	ls = append(ls, envoytest.Listener{Name: "api", Chains: []envoytest.Chain{{
		CertFile: filepath.Join(dir, "api/leaf-only.crt"), KeyFile: filepath.Join(dir, "api/tls.key")}}})
	e := envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.Bootstrap(ls...)})

	// An "admin" that answers with an HTML page, as a misrouted port or a login proxy would.
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body>Sign in</body></html>")
	}))
	t.Cleanup(html.Close)

	var b strings.Builder
	b.WriteString("desired:\n")
	for _, n := range []string{"expired", "soon", "future", "www", "sha1"} {
		fmt.Fprintf(&b, "  - {name: %s, cert_file: %s, key_file: %s}\n", n, filepath.Join(dir, n, "tls.crt"), filepath.Join(dir, n, "tls.key"))
	}
	fmt.Fprintf(&b, "  - {name: api, cert_file: %s, key_file: %s, ca_file: %s}\n", filepath.Join(dir, "api/chain.crt"), filepath.Join(dir, "api/tls.key"), filepath.Join(dir, "api/ca.crt"))
	fmt.Fprintf(&b, "  - {name: broken, cert_file: %s}\n", filepath.Join(dir, "broken/tls.crt"))
	fmt.Fprintf(&b, "envoys:\n  - name: edge\n    admin: %s\n    endpoints:\n", e.AdminURL)
	for _, n := range []string{"expired", "soon", "future", "sha1"} {
		fmt.Fprintf(&b, "      - {address: %s, sni: [%s.example.com], source: %s}\n", e.ListenerAddr(t, n), n, n)
	}
	// www asked for a name its certificate does not cover.
	fmt.Fprintf(&b, "      - {address: %s, sni: [shop.example.com], source: www}\n", e.ListenerAddr(t, "www"))
	fmt.Fprintf(&b, "      - {address: %s, sni: [api.example.com], source: api}\n", e.ListenerAddr(t, "api"))
	// "lb" reads edge's admin but its endpoint reaches the www listener, as when a balancer in
	// front sends traffic to another instance: admin says soon's certificate, the wire shows www's.
	fmt.Fprintf(&b, "  - name: lb\n    admin: %s\n    endpoints:\n      - {address: %s, sni: [soon.example.com], source: soon}\n", e.AdminURL, e.ListenerAddr(t, "www"))
	fmt.Fprintf(&b, "  - name: html\n    admin: %s\n", html.URL)
	cfg := writeConfig(t, b.String())

	code, r := auditJSON(t, cfg)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	has := func(c audit.Code, match func(audit.Finding) bool) bool {
		for _, f := range r.Findings {
			if f.Code == c && match(f) {
				return true
			}
		}
		return false
	}
	src := func(s string) func(audit.Finding) bool {
		return func(f audit.Finding) bool { return f.Subject.Source == s }
	}
	want := []struct {
		code  audit.Code
		what  string
		match func(audit.Finding) bool
	}{
		{audit.Expired, "the expired leaf", src("expired")},
		{audit.Expiring, "the leaf expiring in 3 days", src("soon")},
		{audit.NotYetValid, "the leaf valid from tomorrow", src("future")},
		{audit.WeakCrypto, "the SHA-1 signed leaf", src("sha1")},
		{audit.HostnameMismatch, "www asked for shop.example.com", func(f audit.Finding) bool { return f.Subject.SNI == "shop.example.com" }},
		{audit.ChainIncomplete, "the api listener without its intermediate", src("api")},
		{audit.CABundleHygiene, "the api bundle's retired CA and duplicate", src("api")},
		{audit.LoadedServedMismatch, "lb: admin and wire disagree", func(f audit.Finding) bool { return f.Subject.Envoy == "lb" }},
		{audit.ParseError, "the broken certificate file", src("broken")},
		{audit.ParseError, "the admin answering HTML", func(f audit.Finding) bool { return f.Subject.Envoy == "html" }},
	}
	for _, w := range want {
		if !has(w.code, w.match) {
			t.Errorf("want %s for %s", w.code, w.what)
		}
	}
	if t.Failed() {
		t.Logf("report:%s", describe(r))
	}
	for _, f := range r.Findings {
		// lb's endpoint is asked for soon.example.com and answers with www's certificate, so it
		// is rightly a mismatch too; nothing else is.
		if f.Code == audit.HostnameMismatch && f.Subject.Source != "www" && f.Subject.Envoy != "lb" {
			t.Errorf("HOSTNAME_MISMATCH on %s/%s: only www and lb were asked for a name they lack", f.Subject.Envoy, f.Subject.Source)
		}
	}
	checkNoKeys(t, keys...)
}
