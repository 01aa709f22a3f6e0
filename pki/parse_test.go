package pki_test

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
)

func TestParseCertificates(t *testing.T) {
	root := certs.NewCA(t)
	inter := root.Intermediate(t)
	leaf := inter.Leaf(t, certs.WithDNSNames("a.example.com"))
	many := manyCerts(t, 150)
	crlf := bytes.ReplaceAll(leaf.ChainPEM(), []byte("\n"), []byte("\r\n"))
	withJunk := bytes.Join([][]byte{
		[]byte("subject=CN = leaf\nissuer=CN = inter\n"), leaf.CertPEM,
		[]byte("# a comment\n\n   \t\n"), inter.CertPEM, []byte("trailing junk"),
	}, nil)
	withKey := append(append([]byte{}, leaf.CertPEM...), leaf.KeyPEM...)
	trusted := pem.EncodeToMemory(&pem.Block{Type: "TRUSTED CERTIFICATE", Bytes: append(append([]byte{}, root.Cert.Raw...), 0x30, 0x00)})
	truncated := append(append([]byte{}, leaf.CertPEM...), inter.CertPEM[:len(inter.CertPEM)/2]...)
	badB64 := bytes.Join([][]byte{leaf.CertPEM, []byte("-----BEGIN CERTIFICATE-----\n!!!!notbase64!!!!\n-----END CERTIFICATE-----\n"), inter.CertPEM}, nil)
	notACert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 0x03, 0x02, 0x01, 0x01}})

	cases := map[string]struct {
		reason  string
		in      []byte
		lim     pki.Limits
		wantFPs []string
		wantErr error // errors.Is target; nil with wantAnyErr false means success
		anyErr  bool
	}{
		"SinglePEM":       {reason: "one block", in: leaf.CertPEM, wantFPs: fps(leaf.Cert)},
		"ChainPEM":        {reason: "leaf then intermediate, order kept", in: leaf.ChainPEM(), wantFPs: fps(leaf.Cert, inter.Cert)},
		"CRLF":            {reason: "Windows line ends", in: crlf, wantFPs: fps(leaf.Cert, inter.Cert)},
		"JunkBetween":     {reason: "openssl text and comments between blocks are skipped", in: withJunk, wantFPs: fps(leaf.Cert, inter.Cert)},
		"KeyBlockSkipped": {reason: "a key next to the certificate is not decoded", in: withKey, wantFPs: fps(leaf.Cert)},
		"DER":             {reason: "a raw DER certificate", in: leaf.Cert.Raw, wantFPs: fps(leaf.Cert)},
		"TrustedCert":     {reason: "OpenSSL TRUSTED CERTIFICATE with trust data after the certificate", in: trusted, wantFPs: fps(root.Cert)},
		"ManyCerts":       {reason: "a Mozilla-sized bundle", in: certs.CertPEM(many...), wantFPs: fps(many...)},
		"Empty":           {reason: "nothing", in: nil, wantErr: pki.ErrNoCertificates},
		"Whitespace":      {reason: "blank file", in: []byte(" \n\r\n\t"), wantErr: pki.ErrNoCertificates},
		"OnlyKey":         {reason: "a key file given as certificate", in: leaf.KeyPEM, wantErr: pki.ErrNoCertificates},
		"Truncated":       {reason: "a block without END must not be dropped silently", in: truncated, anyErr: true},
		"BadBase64":       {reason: "a corrupt block in the middle must not be dropped silently", in: badB64, anyErr: true},
		"NotACert":        {reason: "a CERTIFICATE block holding something else", in: notACert, anyErr: true},
		"DERJunk":         {reason: "binary junk", in: []byte{0x30, 0x82, 0xff, 0xff, 0x00}, anyErr: true},
		"TooManyCerts":    {reason: "count limit", in: certs.CertPEM(many[:5]...), lim: pki.Limits{MaxCerts: 4}, wantErr: pki.ErrTooLarge},
		"TooLarge":        {reason: "size limit", in: leaf.ChainPEM(), lim: pki.Limits{MaxBytes: 100}, wantErr: pki.ErrTooLarge},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := pki.ParseCertificates(tc.in, tc.lim)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("%s: error = %v, want %v", tc.reason, err, tc.wantErr)
				}
				return
			case tc.anyErr:
				if err == nil {
					t.Fatalf("%s: parsed %d certificates, want an error", tc.reason, len(got))
				}
				return
			case err != nil:
				t.Fatalf("%s: unexpected error: %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.wantFPs, fps(got...)); diff != "" {
				t.Errorf("%s: fingerprints (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestParseCertificatesRefuses50MBQuickly(t *testing.T) {
	big := bytes.Repeat([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 50<<20/56)
	start := time.Now()
	_, err := pki.ParseCertificates(big, pki.Limits{})
	if !errors.Is(err, pki.ErrTooLarge) {
		t.Fatalf("50 MB input: error = %v, want ErrTooLarge", err)
	}
	_, kerr := pki.ParsePrivateKey(big, pki.Limits{})
	if !errors.Is(kerr, pki.ErrTooLarge) {
		t.Fatalf("50 MB key input: error = %v, want ErrTooLarge", kerr)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("refusing 50 MB took %v; the size check must come before any decoding", d)
	}
}

func TestParseCertificatesCountLimitBeforeDecoding(t *testing.T) {
	// 2000 blocks of garbage: refused on the count, so no block is decoded.
	in := bytes.Repeat([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 2000)
	_, err := pki.ParseCertificates(in, pki.Limits{})
	if !errors.Is(err, pki.ErrTooLarge) {
		t.Fatalf("error = %v, want ErrTooLarge", err)
	}
	if !strings.Contains(err.Error(), "2000") {
		t.Errorf("error %q does not say how many blocks were found", err)
	}
}

func manyCerts(t testing.TB, n int) []*x509.Certificate {
	t.Helper()
	ca := certs.NewCA(t)
	out := make([]*x509.Certificate, n)
	for i := range out {
		out[i] = ca.Leaf(t).Cert
	}
	return out
}
