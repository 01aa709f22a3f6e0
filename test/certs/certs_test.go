package certs_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/test/certs"
)

func TestChainVerifies(t *testing.T) {
	cases := map[string]struct {
		reason string
		ca     []certs.Option
		inter  []certs.Option
		leaf   []certs.Option
	}{
		"DefaultECDSA":    {reason: "the default path (cfssl initca root, ECDSA everywhere) must verify"},
		"RSARootViaCfssl": {reason: "an RSA root from initca signs an ECDSA intermediate", ca: []certs.Option{certs.WithKeyType(certs.RSA2048)}},
		"Ed25519":         {reason: "Ed25519 everywhere goes through crypto/x509", ca: []certs.Option{certs.WithKeyType(certs.Ed25519)}, inter: []certs.Option{certs.WithKeyType(certs.Ed25519)}, leaf: []certs.Option{certs.WithKeyType(certs.Ed25519)}},
		"RSALeafPKCS8":    {reason: "RSA leaf", leaf: []certs.Option{certs.WithKeyType(certs.RSA2048), certs.WithKeyFormat(certs.PKCS8)}},
		"NoCfssl":         {reason: "crypto/x509 root", ca: []certs.Option{certs.WithoutCfssl()}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := certs.NewCA(t, tc.ca...)
			inter := root.Intermediate(t, tc.inter...)
			leaf := inter.Leaf(t, append([]certs.Option{certs.WithDNSNames("a.example.com")}, tc.leaf...)...)
			if !root.Cert.IsCA || !inter.Cert.IsCA || leaf.Cert.IsCA {
				t.Fatalf("%s: IsCA root=%v inter=%v leaf=%v", tc.reason, root.Cert.IsCA, inter.Cert.IsCA, leaf.Cert.IsCA)
			}
			if inter.Root() != root {
				t.Errorf("%s: Root() of intermediate is not the root", tc.reason)
			}
			inters := x509.NewCertPool()
			inters.AddCert(inter.Cert)
			_, err := leaf.Cert.Verify(x509.VerifyOptions{DNSName: "a.example.com", Roots: certs.Pool(root), Intermediates: inters})
			if err != nil {
				t.Fatalf("%s: leaf does not verify: %v", tc.reason, err)
			}
			if got := countBlocks(leaf.ChainPEM()); got != 2 {
				t.Errorf("%s: ChainPEM has %d blocks, want 2 (leaf + intermediate)", tc.reason, got)
			}
			if _, err := tls.X509KeyPair(leaf.ChainPEM(), leaf.KeyPEM); err != nil {
				t.Errorf("%s: tls.X509KeyPair(ChainPEM, KeyPEM): %v", tc.reason, err)
			}
			tc := leaf.TLSCertificate()
			if len(tc.Certificate) != 2 || tc.Leaf != leaf.Cert || tc.PrivateKey == nil {
				t.Errorf("TLSCertificate: %d certs, leaf set %v", len(tc.Certificate), tc.Leaf == leaf.Cert)
			}
		})
	}
}

func TestKeyTypesAndFormats(t *testing.T) {
	ca := certs.NewCA(t)
	cases := map[string]struct {
		opts    []certs.Option
		pemType string
		check   func(any) bool
	}{
		"RSA2048Default": {opts: []certs.Option{certs.WithKeyType(certs.RSA2048)}, pemType: "RSA PRIVATE KEY", check: rsaBits(2048)},
		"RSA1024PKCS8":   {opts: []certs.Option{certs.WithKeyType(certs.RSA1024), certs.WithKeyFormat(certs.PKCS8)}, pemType: "PRIVATE KEY", check: rsaBits(1024)},
		"ECDSADefault":   {opts: nil, pemType: "EC PRIVATE KEY", check: isECDSA(256)},
		"ECDSAP384PKCS8": {opts: []certs.Option{certs.WithKeyType(certs.ECDSAP384), certs.WithKeyFormat(certs.PKCS8)}, pemType: "PRIVATE KEY", check: isECDSA(384)},
		"ECDSAP224":      {opts: []certs.Option{certs.WithKeyType(certs.ECDSAP224)}, pemType: "EC PRIVATE KEY", check: isECDSA(224)},
		"Ed25519":        {opts: []certs.Option{certs.WithKeyType(certs.Ed25519)}, pemType: "PRIVATE KEY", check: func(k any) bool { _, ok := k.(ed25519.PublicKey); return ok }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := ca.Leaf(t, tc.opts...)
			b, _ := pem.Decode(l.KeyPEM)
			if b == nil || b.Type != tc.pemType {
				t.Fatalf("KeyPEM block type = %v, want %q", blockType(b), tc.pemType)
			}
			if !tc.check(l.Cert.PublicKey) {
				t.Errorf("certificate public key %T does not match the requested type", l.Cert.PublicKey)
			}
		})
	}
}

func TestRSAKeyCacheAndFresh(t *testing.T) {
	ca := certs.NewCA(t)
	a := ca.Leaf(t, certs.WithKeyType(certs.RSA2048))
	b := ca.Leaf(t, certs.WithKeyType(certs.RSA2048))
	if !a.Cert.PublicKey.(*rsa.PublicKey).Equal(b.Cert.PublicKey) {
		t.Errorf("two RSA-2048 leaves have different keys; the per-process cache is not used")
	}
	c := ca.Leaf(t, certs.WithKeyType(certs.RSA2048), certs.WithFreshKey())
	if a.Cert.PublicKey.(*rsa.PublicKey).Equal(c.Cert.PublicKey) {
		t.Errorf("WithFreshKey returned the cached key")
	}
	d := ca.Leaf(t, certs.WithKey(c.Key))
	if !bytes.Equal(d.Cert.RawSubjectPublicKeyInfo, c.Cert.RawSubjectPublicKeyInfo) {
		t.Errorf("WithKey did not reuse the key")
	}
}

func TestOddCertificates(t *testing.T) {
	rsaCA := certs.NewCA(t, certs.WithKeyType(certs.RSA2048))
	now := time.Now()

	sha1Leaf := rsaCA.Leaf(t, certs.WithSHA1())
	if sha1Leaf.Cert.SignatureAlgorithm != x509.SHA1WithRSA {
		t.Errorf("WithSHA1: signature algorithm %v", sha1Leaf.Cert.SignatureAlgorithm)
	}
	sha1Root := certs.NewCA(t, certs.WithKeyType(certs.RSA2048), certs.WithSHA1())
	if sha1Root.Cert.SignatureAlgorithm != x509.SHA1WithRSA {
		t.Errorf("WithSHA1 root: signature algorithm %v", sha1Root.Cert.SignatureAlgorithm)
	}

	exp := rsaCA.Leaf(t, certs.Expired())
	if !exp.Cert.NotAfter.Before(now) {
		t.Errorf("Expired(): NotAfter %v is not in the past", exp.Cert.NotAfter)
	}
	nyv := rsaCA.Leaf(t, certs.NotYetValid())
	if !nyv.Cert.NotBefore.After(now) {
		t.Errorf("NotYetValid(): NotBefore %v is not in the future", nyv.Cert.NotBefore)
	}
	expCA := certs.NewCA(t, certs.Expired())
	if !expCA.Cert.NotAfter.Before(now) {
		t.Errorf("expired CA: NotAfter %v", expCA.Cert.NotAfter)
	}

	lz := rsaCA.Leaf(t, certs.WithLeadingZeroSerial())
	if b := lz.Cert.SerialNumber.Bytes(); len(b) != 16 || b[0] < 0x80 {
		t.Errorf("WithLeadingZeroSerial: serial bytes %x do not need a leading zero in DER", b)
	}
	s := rsaCA.Leaf(t, certs.WithSerial(big.NewInt(0x0a0b)))
	if s.Cert.SerialNumber.Int64() != 0x0a0b {
		t.Errorf("WithSerial: got %v", s.Cert.SerialNumber)
	}

	ca := rsaCA.Leaf(t, certs.WithClientAuth())
	if diff := cmp.Diff([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, ca.Cert.ExtKeyUsage); diff != "" {
		t.Errorf("WithClientAuth EKU (-want +got):\n%s", diff)
	}
	only := rsaCA.Leaf(t, certs.WithExtKeyUsage(x509.ExtKeyUsageClientAuth))
	if diff := cmp.Diff([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, only.Cert.ExtKeyUsage); diff != "" {
		t.Errorf("WithExtKeyUsage (-want +got):\n%s", diff)
	}

	sans := rsaCA.Leaf(t, certs.WithCommonName("cn"), certs.WithDNSNames("*.example.com"),
		certs.WithURIs("spiffe://cluster.local/ns/a/sa/b"), certs.WithIPs("10.0.0.1", "::1"))
	if diff := cmp.Diff([]string{"*.example.com"}, sans.Cert.DNSNames); diff != "" {
		t.Errorf("DNS SANs (-want +got):\n%s", diff)
	}
	if len(sans.Cert.URIs) != 1 || sans.Cert.URIs[0].String() != "spiffe://cluster.local/ns/a/sa/b" {
		t.Errorf("URI SANs: %v", sans.Cert.URIs)
	}
	if len(sans.Cert.IPAddresses) != 2 || !sans.Cert.IPAddresses[0].Equal(net.ParseIP("10.0.0.1")) {
		t.Errorf("IP SANs: %v", sans.Cert.IPAddresses)
	}
	if sans.Cert.Subject.CommonName != "cn" {
		t.Errorf("CN = %q", sans.Cert.Subject.CommonName)
	}
}

func TestTLSHandshake(t *testing.T) {
	root := certs.NewCA(t)
	leaf := root.Intermediate(t).Leaf(t, certs.WithDNSNames("svc.test"))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate()}})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(),
		&tls.Config{ServerName: "svc.test", RootCAs: certs.Pool(root)})
	if err != nil {
		t.Fatalf("handshake with minted chain: %v", err)
	}
	defer conn.Close()
	if got := len(conn.ConnectionState().PeerCertificates); got != 2 {
		t.Errorf("served %d certificates, want 2", got)
	}
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	certs.WriteFiles(t, dir, map[string][]byte{"a/tls.crt": []byte("x"), "ca.crt": []byte("y")})
	b, err := os.ReadFile(filepath.Join(dir, "a", "tls.crt"))
	if err != nil || string(b) != "x" {
		t.Fatalf("read back a/tls.crt: %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "ca.crt"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca.crt mode: %v, %v", fi, err)
	}
}

func TestBundleAndCertPEM(t *testing.T) {
	a, b := certs.NewCA(t), certs.NewCA(t)
	if got := countBlocks(certs.Bundle(a, b)); got != 2 {
		t.Errorf("Bundle has %d blocks", got)
	}
	if !bytes.Equal(certs.CertPEM(a.Cert), a.CertPEM) {
		t.Errorf("CertPEM(a.Cert) differs from a.CertPEM")
	}
	if strings.Contains(string(certs.Bundle(a)), "PRIVATE") {
		t.Errorf("Bundle leaked a private key")
	}
}

func countBlocks(b []byte) int {
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return n
		}
		n++
	}
}

func blockType(b *pem.Block) string {
	if b == nil {
		return "<none>"
	}
	return b.Type
}

func rsaBits(n int) func(any) bool {
	return func(k any) bool { r, ok := k.(*rsa.PublicKey); return ok && r.N.BitLen() == n }
}

func isECDSA(bits int) func(any) bool {
	return func(k any) bool { e, ok := k.(*ecdsa.PublicKey); return ok && e.Curve.Params().BitSize == bits }
}
