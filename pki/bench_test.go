package pki_test

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
)

// BenchmarkParseCertificates150 parses a bundle the size of the Mozilla root store, the largest
// trust bundle certdrift expects to read on every Secret event.
func BenchmarkParseCertificates150(b *testing.B) {
	ca := certs.NewCA(b, certs.WithKeyType(certs.RSA2048))
	cs := make([]*x509.Certificate, 150)
	for i := range cs {
		opt := certs.WithKeyType(certs.ECDSAP256)
		if i%2 == 0 {
			opt = certs.WithKeyType(certs.RSA2048)
		}
		cs[i] = ca.Intermediate(b, opt).Cert
	}
	bundle := certs.CertPEM(cs...)
	b.SetBytes(int64(len(bundle)))
	b.ReportAllocs()
	for b.Loop() {
		got, err := pki.ParseCertificates(bundle, pki.Limits{})
		if err != nil || len(got) != 150 {
			b.Fatalf("parsed %d, %v", len(got), err)
		}
	}
}

// BenchmarkVerify verifies a leaf through one intermediate against a two-CA rotation bundle,
// the check run for every desired certificate and every peer pairing.
func BenchmarkVerify(b *testing.B) {
	for _, kt := range []certs.KeyType{certs.ECDSAP256, certs.RSA2048} {
		b.Run(kt.String(), func(b *testing.B) {
			oldCA := certs.NewCA(b, certs.WithKeyType(kt))
			newCA := certs.NewCA(b, certs.WithKeyType(kt))
			inter := oldCA.Intermediate(b, certs.WithKeyType(kt))
			leaf := inter.Leaf(b, certs.WithKeyType(kt))
			roots := []*x509.Certificate{newCA.Cert, oldCA.Cert}
			inters := []*x509.Certificate{inter.Cert}
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				if r := pki.Verify(leaf.Cert, inters, roots, now, x509.ExtKeyUsageServerAuth); !r.OK || r.RootIndex != 1 {
					b.Fatalf("verify: %+v", r)
				}
			}
		})
	}
}

// BenchmarkVerifyGap is the failing path: an unknown authority triggers the signature-only
// fallback search.
func BenchmarkVerifyGap(b *testing.B) {
	ca := certs.NewCA(b)
	leaf := ca.Intermediate(b).Leaf(b)
	roots := []*x509.Certificate{certs.NewCA(b).Cert, certs.NewCA(b).Cert}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if r := pki.Verify(leaf.Cert, nil, roots, now, x509.ExtKeyUsageAny); r.Reason != pki.ReasonUnknownAuthority {
			b.Fatalf("reason %q", r.Reason)
		}
	}
}
