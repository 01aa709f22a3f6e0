package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync/atomic"
	"time"

	"github.com/cloudflare/cfssl/csr"
	"github.com/cloudflare/cfssl/initca"
)

// nameSeq keeps default common names unique in one process, so that two CAs minted by one test
// are told apart in failure messages.
var nameSeq atomic.Int64

func defaultName(kind string) string {
	return fmt.Sprintf("certdrift test %s %d", kind, nameSeq.Add(1))
}

// NewCA mints a self-signed root CA, valid from an hour ago for ten years unless told otherwise.
func NewCA(t TB, opts ...Option) *Authority {
	t.Helper()
	o := newOptions(defaultName("root CA"), opts)
	key := mustKey(t, o)
	var cert *x509.Certificate
	var err error
	if canUseInitca(o, key) {
		cert, err = rootViaInitca(o, key)
	} else {
		cert, err = create(caTemplate(o, key), nil, key, key, o.sigAlg)
	}
	if err != nil {
		t.Fatalf("mint root CA %q: %v", o.commonName, err)
	}
	return &Authority{Cert: cert, CertPEM: encodeCert(cert), KeyPEM: mustEncodeKey(t, key, o.keyFormat), Key: key}
}

// Intermediate mints a CA signed by a.
func (a *Authority) Intermediate(t TB, opts ...Option) *Authority {
	t.Helper()
	o := newOptions(defaultName("intermediate CA"), opts)
	key := mustKey(t, o)
	cert, err := create(caTemplate(o, key), a.Cert, key, a.Key, o.sigAlg)
	if err != nil {
		t.Fatalf("mint intermediate CA %q under %q: %v", o.commonName, a.Cert.Subject.CommonName, err)
	}
	return &Authority{Cert: cert, CertPEM: encodeCert(cert), KeyPEM: mustEncodeKey(t, key, o.keyFormat), Key: key, Parent: a}
}

// Leaf mints an end-entity certificate signed by a. Without WithDNSNames/WithIPs/WithURIs it
// carries the common name as its only DNS name, since Go and Envoy ignore the CN for hostnames.
func (a *Authority) Leaf(t TB, opts ...Option) *Leaf {
	t.Helper()
	o := newOptions("", opts)
	if o.commonName == "" {
		o.commonName = "leaf.test"
		if len(o.dnsNames) > 0 {
			o.commonName = o.dnsNames[0]
		}
	}
	if len(o.dnsNames) == 0 && len(o.ips) == 0 && len(o.uris) == 0 {
		o.dnsNames = []string{o.commonName}
	}
	key := mustKey(t, o)
	tmpl := baseTemplate(o, key)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if _, isRSA := key.Public().(*rsa.PublicKey); isRSA {
		// RSA key exchange (TLS 1.2 static RSA) needs key encipherment.
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if o.ekuSet {
		tmpl.ExtKeyUsage = o.extKeyUsage
	}
	if o.clientAuth {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	cert, err := create(tmpl, a.Cert, key, a.Key, o.sigAlg)
	if err != nil {
		t.Fatalf("mint leaf %q under %q: %v", o.commonName, a.Cert.Subject.CommonName, err)
	}
	return &Leaf{Cert: cert, CertPEM: encodeCert(cert), KeyPEM: mustEncodeKey(t, key, o.keyFormat), Key: key, Issuer: a}
}

func mustKey(t TB, o *options) crypto.Signer {
	t.Helper()
	if o.badSAN != "" {
		t.Fatalf("certs: SAN %q does not parse", o.badSAN)
	}
	k, err := newKey(o)
	if err != nil {
		t.Fatalf("generate %s key: %v", o.keyType, err)
	}
	return k
}

func mustEncodeKey(t TB, key crypto.Signer, f KeyFormat) []byte {
	t.Helper()
	b, err := EncodeKey(key, f)
	if err != nil {
		t.Fatalf("encode key: %v", err)
	}
	return b
}

func encodeCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func randomSerial() *big.Int {
	// 128 bits with the top bit cleared: positive, and printed without a leading zero byte, so
	// that only WithLeadingZeroSerial produces that case.
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[0] &= 0x7f
	b[0] |= 0x01
	return new(big.Int).SetBytes(b)
}

func baseTemplate(o *options, key crypto.Signer) *x509.Certificate {
	now := time.Now()
	nb, na := o.notBefore, o.notAfter
	if nb.IsZero() {
		nb = now.Add(-time.Hour)
	}
	if na.IsZero() {
		// A year and half a day: Envoy's /certs prints whole days_until_expiration, which for a
		// leaf expiring exactly a year from now drops from 365 to 364 as the second it was minted
		// ends, so two reads of an unchanged Envoy could differ. Half a day keeps the count still
		// for as long as a test runs.
		na = now.Add(365*24*time.Hour + 12*time.Hour)
		if na.Before(nb) {
			na = nb.Add(365*24*time.Hour + 12*time.Hour)
		}
	}
	serial := o.serial
	if serial == nil {
		serial = randomSerial()
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: o.commonName, Organization: []string{"certdrift tests"}},
		NotBefore:    nb,
		NotAfter:     na,
		DNSNames:     o.dnsNames,
		URIs:         o.uris,
		IPAddresses:  o.ips,
		SubjectKeyId: skid(key),
	}
}

func caTemplate(o *options, key crypto.Signer) *x509.Certificate {
	tmpl := baseTemplate(o, key)
	if o.notAfter.IsZero() {
		tmpl.NotAfter = tmpl.NotBefore.Add(10 * 365 * 24 * time.Hour)
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	if o.pathLenSet {
		tmpl.MaxPathLen = o.maxPathLen
		tmpl.MaxPathLenZero = o.maxPathLen == 0
	}
	if o.ekuSet {
		tmpl.ExtKeyUsage = o.extKeyUsage
	}
	return tmpl
}

// skid is the RFC 5280 method-1 key identifier (SHA-1 of the public key bits), set explicitly so
// that x509 fills the authority key identifier of children and chain building has it to match.
func skid(key crypto.Signer) []byte {
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil
	}
	sum := sha1.Sum(der)
	return sum[:]
}

// create signs tmpl with signerKey; parent nil means self-signed.
func create(tmpl, parent *x509.Certificate, key, signerKey crypto.Signer, sigAlg x509.SignatureAlgorithm) (*x509.Certificate, error) {
	if parent == nil {
		parent = tmpl
	}
	tmpl.SignatureAlgorithm = sigAlg
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signerKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// canUseInitca reports whether cfssl initca can mint this root exactly as asked: it picks the
// serial, validity (now-5m, +expiry) and signature algorithm itself, and supports RSA and ECDSA
// on P-256/P-384/P-521 only.
func canUseInitca(o *options, key crypto.Signer) bool {
	if o.noCfssl || o.serial != nil || o.sigAlg != x509.UnknownSignatureAlgorithm ||
		!o.notBefore.IsZero() || !o.notAfter.IsZero() || o.pathLenSet || o.ekuSet ||
		len(o.dnsNames)+len(o.ips)+len(o.uris) > 0 {
		return false
	}
	switch k := key.Public().(type) {
	case *rsa.PublicKey:
		return k.N.BitLen() >= 2048
	case *ecdsa.PublicKey:
		return k.Curve == elliptic.P256() || k.Curve == elliptic.P384()
	}
	return false
}

func rootViaInitca(o *options, key crypto.Signer) (*x509.Certificate, error) {
	req := &csr.CertificateRequest{
		CN:    o.commonName,
		Names: []csr.Name{{O: "certdrift tests"}},
		CA:    &csr.CAConfig{Expiry: fmt.Sprintf("%dh", 10*365*24)},
	}
	certPEM, _, err := initca.NewFromSigner(req, key)
	if err != nil {
		return nil, fmt.Errorf("cfssl initca: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, fmt.Errorf("cfssl initca returned no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}
