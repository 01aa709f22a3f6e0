package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"strings"
	"testing"
)

// keyDERs mints one private key of each kind and encoding the redactor must recognise.
func keyDERs(t *testing.T) map[string][]byte {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(ek)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(edk)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"PKCS1": x509.MarshalPKCS1PrivateKey(rk), "SEC1": sec1, "PKCS8Ed25519": p8}
}

// leaks reports whether out holds 12 consecutive bytes of der, or 16 consecutive characters of its
// base64 or hex forms. It never prints what it found.
func leaks(out string, der []byte) bool {
	forms := []string{string(der), base64.StdEncoding.EncodeToString(der), base64.URLEncoding.EncodeToString(der), hex.EncodeToString(der), strings.ToUpper(hex.EncodeToString(der))}
	for fi, f := range forms {
		w := 16
		if fi == 0 {
			w = 12
		}
		for i := 0; i+w <= len(f); i++ {
			if strings.Contains(out, f[i:i+w]) {
				return true
			}
		}
	}
	return false
}

func TestRedactKeyMaterial(t *testing.T) {
	for kind, der := range keyDERs(t) {
		b64 := base64.StdEncoding.EncodeToString(der)
		pemText := string(pem.EncodeToMemory(&pem.Block{Type: "SOMETHING", Bytes: der}))
		lines := strings.Split(strings.TrimSpace(pemText), "\n")
		var colon []string
		for _, c := range der {
			colon = append(colon, hex.EncodeToString([]byte{c}))
		}
		for name, body := range map[string]string{
			"PEMAnyType":      "error: " + pemText + " trailing",
			"PEMCutOff":       "oops " + pemText[:len(pemText)/2],
			"BareBase64":      `{"x":"` + b64 + `"}`,
			"Base64URL":       "k=" + base64.RawURLEncoding.EncodeToString(der),
			"JSONEscapedPEM":  `{"k":"` + strings.Join(lines[1:len(lines)-1], `\n`) + `"}`,
			"PEMLinesNoArmor": strings.Join(lines[1:len(lines)-1], "\n"),
			"Hex":             "key " + hex.EncodeToString(der),
			"UpperHex":        "key " + strings.ToUpper(hex.EncodeToString(der)),
			"ColonHex":        "priv:\n    " + strings.Join(colon, ":"),
			"RawDER":          "body: " + string(der) + " end",
		} {
			t.Run(kind+"/"+name, func(t *testing.T) {
				for _, cut := range []int{len(body), 200, 57} {
					in := body[:min(cut, len(body))]
					if out := string(RedactKeyMaterial([]byte(in))); leaks(out, der) {
						t.Errorf("cut at %d: key bytes survive redaction (%d bytes out)", cut, len(out))
					}
				}
				if out := string(RedactKeyMaterialInName([]byte(body))); leaks(out, der) {
					t.Errorf("as a name: key bytes survive redaction")
				}
			})
		}
	}
}

func TestRedactKeepsText(t *testing.T) {
	for _, s := range []string{
		"no such listener: ingress_https_443 (filter chain default)",
		"/var/lib/kubelet/pods/0f8c1a2b-1234-4e5f-9abc-def012345678/volumes/kubernetes.io~secret/certs/tls.crt",
		"spiffe://cluster.local/ns/default/sa/bookinfo-productpage",
		"envoy-default-eg-e41e7b31-6f8b8c9d7-x2x9p",
		"a\x1b[31mred\x00b c",
	} {
		if got := string(RedactKeyMaterial([]byte(s))); got != s {
			t.Errorf("RedactKeyMaterial(%q) = %q, want it unchanged", s, got)
		}
	}
	if got := string(RedactKeyMaterialInName([]byte("/tmp/TestSnapshotRealEnvoy386925275/002/static.crt"))); !strings.HasSuffix(got, "static.crt") || strings.Contains(got, "withheld") {
		t.Errorf("a test path as a name = %q, want it unchanged", got)
	}
}

func FuzzRedactKeyMaterial(f *testing.F) {
	f.Add([]byte("-----BEGIN X-----\nMIIB\n-----END X-----"), true)
	f.Add([]byte("a\x1b[31mred\x00b c 0a:0b:0c"), false)
	f.Fuzz(func(t *testing.T, b []byte, name bool) {
		out := RedactKeyMaterial(b)
		if name {
			out = RedactKeyMaterialInName(b)
		}
		// Redacting what is already redacted changes nothing: markers are not blobs.
		if again := RedactKeyMaterial(out); !name && string(again) != string(out) && len(again) > len(out) {
			t.Errorf("redaction grew on a second pass: %d -> %d bytes", len(out), len(again))
		}
	})
}

// TestRedactNameKeepsLongPaths: a file path whose components are long mixed-case runs with
// digits (a Go test's temporary directory) is a name, not key bytes.
func TestRedactNameKeepsLongPaths(t *testing.T) {
	for _, p := range []string{
		"/tmp/TestStaticTrustGoesStaleSDSTrustConverges3360834549/001/secret/ca.crt",
		"/tmp/TestStaticTrustGoesStaleSDSTrustConverges3360834549/001/secret/TestCase/Abc123/tls.crt",
	} {
		if got := string(RedactKeyMaterialInName([]byte(p))); got != p {
			t.Errorf("RedactKeyMaterialInName(%q) = %q, want it unchanged", p, got)
		}
	}
}
