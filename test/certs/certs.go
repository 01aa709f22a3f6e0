// Package certs mints PKI for tests: a root CA, intermediates and leaves, in every key type and
// key encoding certdrift must read, plus the odd ones (expired, not yet valid, SHA-1 signed, RSA
// 1024, serials whose DER starts with a zero byte). Nothing here is checked in: every test makes
// its own certificates, so none can expire in the repository.
//
// Roots come from cfssl's initca when cfssl can express them (the same code path cfssl users mint
// their CAs with). Intermediates and leaves, and roots cfssl cannot express (Ed25519, SHA-1,
// chosen serials or validity), are made with crypto/x509: cfssl's local signer takes its
// validity, serial and usages from a signing policy and a CSR, which would mean building both
// for every certificate while adding nothing a test can observe.
package certs

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"

	cflog "github.com/cloudflare/cfssl/log"
)

func init() {
	// cfssl logs every signature at info level to stderr, which would bury test output.
	cflog.Level = cflog.LevelFatal
}

// Authority is a CA: a self-signed root (Parent nil) or an intermediate.
type Authority struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	Key     crypto.Signer
	Parent  *Authority // issuer; nil for a root
}

// Leaf is an end-entity certificate with its issuing chain.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	Key     crypto.Signer
	Issuer  *Authority
}

// Root returns the self-signed CA at the top of a's chain.
func (a *Authority) Root() *Authority {
	for a.Parent != nil {
		a = a.Parent
	}
	return a
}

// intermediates returns a and its ancestors up to, not including, the root; nearest first.
func (a *Authority) intermediates() []*Authority {
	var out []*Authority
	for x := a; x != nil && x.Parent != nil; x = x.Parent {
		out = append(out, x)
	}
	return out
}

// ChainPEM is a's certificate followed by its intermediates, without the root: what a server
// holding this CA's certificate would send. For a root it is just CertPEM.
func (a *Authority) ChainPEM() []byte {
	if a.Parent == nil {
		return bytes.Clone(a.CertPEM)
	}
	var b bytes.Buffer
	for _, x := range a.intermediates() {
		b.Write(x.CertPEM)
	}
	return b.Bytes()
}

// TLSCertificate is a's chain and key for tls.Config.Certificates.
func (a *Authority) TLSCertificate() tls.Certificate {
	var chain [][]byte
	for _, x := range a.intermediates() {
		chain = append(chain, x.Cert.Raw)
	}
	if a.Parent == nil {
		chain = [][]byte{a.Cert.Raw}
	}
	return tls.Certificate{Certificate: chain, PrivateKey: a.Key, Leaf: a.Cert}
}

// Chain is the leaf followed by its intermediates (no root), as certificates.
func (l *Leaf) Chain() []*x509.Certificate {
	out := []*x509.Certificate{l.Cert}
	for _, x := range l.Issuer.intermediates() {
		out = append(out, x.Cert)
	}
	return out
}

// ChainPEM is the leaf followed by its intermediates, without the root: a tls.crt as
// cert-manager writes it.
func (l *Leaf) ChainPEM() []byte {
	var b bytes.Buffer
	b.Write(l.CertPEM)
	for _, x := range l.Issuer.intermediates() {
		b.Write(x.CertPEM)
	}
	return b.Bytes()
}

// TLSCertificate is the leaf's chain and key for tls.Config.Certificates.
func (l *Leaf) TLSCertificate() tls.Certificate {
	var chain [][]byte
	for _, c := range l.Chain() {
		chain = append(chain, c.Raw)
	}
	return tls.Certificate{Certificate: chain, PrivateKey: l.Key, Leaf: l.Cert}
}

// Pool is a cert pool holding the given authorities' certificates, for tls.Config.RootCAs.
func Pool(as ...*Authority) *x509.CertPool {
	p := x509.NewCertPool()
	for _, a := range as {
		p.AddCert(a.Cert)
	}
	return p
}

// Bundle concatenates the authorities' certificates as PEM, in order: a ca.crt.
func Bundle(as ...*Authority) []byte {
	var b bytes.Buffer
	for _, a := range as {
		b.Write(a.CertPEM)
	}
	return b.Bytes()
}

// CertPEM encodes DER certificates as PEM, in order, for building odd bundles.
func CertPEM(cs ...*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range cs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// WriteFiles writes each name (a slash-separated path relative to dir; subdirectories are
// created) with mode 0600, failing the test on any error.
func WriteFiles(t TB, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatalf("create directory for %s: %v", p, err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
}

// TB is the part of testing.TB this package uses. It is an interface of its own so that the
// quickstart demo (test/demo), which runs outside `go test`, can mint certificates too;
// *testing.T and *testing.B satisfy it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}
