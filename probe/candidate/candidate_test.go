package candidate

import (
	"crypto/x509"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/test/certs"
)

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestSecrets(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("ca"))
	leaf := ca.Leaf(t, certs.WithDNSNames("a.test"))
	keyLine := b64(leaf.KeyPEM)
	doc := func(name, ns string, extra string) string {
		s := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: " + name + "\n"
		if ns != "" {
			s += "  namespace: " + ns + "\n"
		}
		return s + "type: kubernetes.io/tls\ndata:\n  tls.crt: " + b64(leaf.ChainPEM()) + "\n  tls.key: " + keyLine + "\n" + extra
	}
	two := doc("envoy", "eg", "  ca.crt: "+b64(ca.CertPEM)+"\n") + "---\n" + doc("envoy-gateway", "eg", "")
	cs, err := Secrets(Spec{Path: write(t, "two.yaml", two)}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Source != "eg/envoy" || cs[1].Source != "eg/envoy-gateway" || len(cs[0].Bundle) != 1 || cs[1].Bundle != nil ||
		len(cs[0].Chain) != len(leaf.Chain()) || cs[0].Chain[0].SerialNumber.Cmp(leaf.Cert.SerialNumber) != 0 {
		t.Errorf("two Secrets: %+v", cs)
	}
	// Local mode names the source by the Secret's name; SOURCE= overrides it.
	if cs, err := Secrets(Spec{Path: write(t, "one.yaml", doc("web", "", ""))}, false); err != nil || cs[0].Source != "web" {
		t.Errorf("local mode: %+v %v, want source web", cs, err)
	}
	if cs, err := Secrets(Spec{Source: "front", Path: write(t, "one.yaml", doc("web", "", ""))}, false); err != nil || cs[0].Source != "front" {
		t.Errorf("SOURCE=: %+v %v, want source front", cs, err)
	}
	for name, tc := range map[string]struct{ body, want string }{
		"NoNamespace":   {doc("web", "", ""), "metadata.namespace is missing"},
		"NotASecret":    {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", `kind "ConfigMap"`},
		"NotBase64":     {strings.Replace(doc("web", "ns", ""), "tls.crt: ", "tls.crt: $$$", 1), "data.tls.crt is not base64"},
		"NoCert":        {"apiVersion: v1\nkind: Secret\nmetadata: {name: x, namespace: y}\ndata:\n  tls.key: " + keyLine + "\n", "neither tls.crt nor ca.crt"},
		"NotYAML":       {"apiVersion: v1\nkind: Secret\n  data: [\n tls.key: " + keyLine, "not YAML"},
		"CertNotPEM":    {"apiVersion: v1\nkind: Secret\nmetadata: {name: x, namespace: y}\ndata:\n  tls.crt: " + b64([]byte("garbage")) + "\n  tls.key: " + keyLine + "\n", "tls.crt"},
		"NothingInside": {"---\n", "no Secret"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Secrets(Spec{Path: write(t, "bad.yaml", tc.body)}, true)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), keyLine[:40]) || strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("the error repeats key material: %v", err)
			}
		})
	}
}

// TestSecretKeys: a manifest's tls.key is read for its public half only (data or stringData),
// one that does not parse is KeyErr without a byte of it, and a manifest without one has neither.
func TestSecretKeys(t *testing.T) {
	ca := certs.NewCA(t)
	leaf, other := ca.Leaf(t), ca.Leaf(t, certs.WithFreshKey())
	head := "apiVersion: v1\nkind: Secret\nmetadata: {name: web, namespace: ns}\n"
	read := func(body string) desired.Candidate {
		t.Helper()
		cs, err := Secrets(Spec{Path: write(t, "s.yaml", body)}, true)
		if err != nil {
			t.Fatal(err)
		}
		return cs[0]
	}
	crt := "data:\n  tls.crt: " + b64(leaf.ChainPEM()) + "\n"
	if c := read(head + crt + "  tls.key: " + b64(leaf.KeyPEM) + "\n"); c.Key == nil || c.KeyErr != nil || !pki.KeyMatches(c.Chain[0], c.Key.Public) {
		t.Errorf("data.tls.key of the leaf: key %+v err %v, want its public half, matching", c.Key, c.KeyErr)
	}
	quoted := strings.ReplaceAll(string(other.KeyPEM), "\n", "\\n")
	if c := read(head + crt + "stringData:\n  tls.key: \"" + quoted + "\"\n"); c.Key == nil || pki.KeyMatches(c.Chain[0], c.Key.Public) {
		t.Errorf("stringData.tls.key of another leaf: key %+v err %v, want its public half, not matching", c.Key, c.KeyErr)
	}
	garbage := "-----BEGIN EC PRIVATE KEY-----\nc2VjcmV0LXNlY3JldC1zZWNyZXQ=\n-----END EC PRIVATE KEY-----\n"
	c := read(head + crt + "  tls.key: " + b64([]byte(garbage)) + "\n")
	if c.Key != nil || c.KeyErr == nil || strings.Contains(c.KeyErr.Error(), "c2VjcmV0") || !strings.Contains(c.KeyErr.Error(), "tls.key") {
		t.Errorf("a tls.key that does not parse: key %+v err %v, want an error naming tls.key and quoting none of it", c.Key, c.KeyErr)
	}
	if c := read(head + crt); c.Key != nil || c.KeyErr != nil {
		t.Errorf("no tls.key: key %+v err %v, want neither", c.Key, c.KeyErr)
	}
	// Merged with a bundle from another file, the key stays with its leaf.
	cs, err := Merge([]desired.Candidate{{Source: "ns/web", From: "b.pem", Bundle: []*x509.Certificate{ca.Cert}}, read(head + crt + "  tls.key: " + b64(leaf.KeyPEM) + "\n")})
	if err != nil || cs[0].Key == nil {
		t.Errorf("Merge: %+v %v, want the leaf's key kept", cs, err)
	}
}

func TestMergeAndSpecs(t *testing.T) {
	ca := certs.NewCA(t)
	leaf := ca.Leaf(t)
	if _, err := ParseSpec("nofile", true); err == nil {
		t.Error("ParseSpec without SOURCE= accepted for --leaf")
	}
	if s, err := ParseSpec("ns/web=/tmp/x.pem", true); err != nil || s.Source != "ns/web" || s.Path != "/tmp/x.pem" {
		t.Errorf("ParseSpec: %+v %v", s, err)
	}
	cs, err := Merge([]desired.Candidate{{Source: "a", From: "l.pem", Chain: leaf.Chain()}, {Source: "a", From: "b.pem", Bundle: []*x509.Certificate{ca.Cert}}})
	if err != nil || len(cs) != 1 || cs[0].Chain == nil || cs[0].Bundle == nil {
		t.Errorf("Merge of a leaf and a bundle: %+v %v", cs, err)
	}
	if _, err := Merge([]desired.Candidate{{Source: "a", From: "l.pem", Chain: leaf.Chain()}, {Source: "a", From: "m.pem", Chain: leaf.Chain()}}); err == nil {
		t.Error("Merge accepted two leaves for one source")
	}
	p := write(t, "leaf.pem", string(leaf.ChainPEM())+string(leaf.KeyPEM))
	if c, err := Leaf(Spec{Source: "a", Path: p}); err != nil || len(c.Chain) != len(leaf.Chain()) {
		t.Errorf("Leaf: %d certificates, %v (a key in the file is skipped)", len(c.Chain), err)
	}
	if _, err := Leaf(Spec{Source: "a", Path: filepath.Join(t.TempDir(), "missing.pem")}); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("Leaf of a missing file: %v, want an error naming it", err)
	}
}

// FuzzSecrets: any manifest is read or refused, never a panic.
func FuzzSecrets(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: x, namespace: y}\ndata: {tls.crt: aGVsbG8=}\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("kind: ["))
	f.Add([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: x}\nstringData: {ca.crt: \"-----BEGIN CERTIFICATE-----\\nAA==\\n-----END CERTIFICATE-----\"}\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, _ = secretsFrom(body, Spec{Path: "fuzz.yaml"}, true)
	})
}
