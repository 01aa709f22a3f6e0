package envoytest

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
)

// certsSerials returns the leaf serials /certs lists, one per TLS context, in order. It is a
// deliberately small decoder: the real one is probe/envoyadmin's, these tests check Envoy.
func certsSerials(t *testing.T, e *Envoy) []*big.Int {
	t.Helper()
	var doc struct {
		Certificates []struct {
			CertChain []struct {
				SerialNumber string `json:"serial_number"`
			} `json:"cert_chain"`
		} `json:"certificates"`
	}
	body := e.AdminGet(t, "/certs")
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("decode /certs: %v", err)
	}
	var out []*big.Int
	for _, c := range doc.Certificates {
		for i, cc := range c.CertChain {
			if i > 0 {
				break
			}
			n, ok := new(big.Int).SetString(cc.SerialNumber, 16)
			if !ok {
				t.Fatalf("/certs serial %q is not hex", cc.SerialNumber)
			}
			out = append(out, n)
		}
	}
	return out
}

// dumpedSecret is one secret of /config_dump?resource=dynamic_active_secrets (or _warming_).
type dumpedSecret struct {
	Name        string
	LastUpdated string
	Leaf        *x509.Certificate // from inline_bytes, nil when the dump names a file
	Filename    string
	KeyRedacted bool
}

func dumpedSecrets(t *testing.T, e *Envoy, resource string) []dumpedSecret {
	t.Helper()
	var doc struct {
		Configs []struct {
			Name        string `json:"name"`
			LastUpdated string `json:"last_updated"`
			Secret      struct {
				TLSCertificate struct {
					CertificateChain struct {
						InlineBytes string `json:"inline_bytes"`
						Filename    string `json:"filename"`
					} `json:"certificate_chain"`
					PrivateKey struct {
						InlineBytes string `json:"inline_bytes"`
					} `json:"private_key"`
				} `json:"tls_certificate"`
			} `json:"secret"`
		} `json:"configs"`
	}
	body := e.AdminGet(t, "/config_dump?resource="+resource)
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("decode config_dump %s: %v", resource, err)
	}
	var out []dumpedSecret
	for _, c := range doc.Configs {
		tc := c.Secret.TLSCertificate
		s := dumpedSecret{Name: c.Name, LastUpdated: c.LastUpdated, Filename: tc.CertificateChain.Filename}
		if tc.CertificateChain.InlineBytes != "" {
			pemBytes, err := base64.StdEncoding.DecodeString(tc.CertificateChain.InlineBytes)
			if err != nil {
				t.Fatalf("config_dump secret %s: inline_bytes: %v", c.Name, err)
			}
			block, _ := pem.Decode(pemBytes)
			if block == nil {
				t.Fatalf("config_dump secret %s: inline_bytes hold no PEM", c.Name)
			}
			s.Leaf, err = x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatalf("config_dump secret %s: %v", c.Name, err)
			}
		}
		if k := tc.PrivateKey.InlineBytes; k != "" {
			raw, _ := base64.StdEncoding.DecodeString(k)
			s.KeyRedacted = strings.TrimSpace(string(raw)) == "[redacted]"
		}
		out = append(out, s)
	}
	return out
}
