package pki_test

import (
	"bytes"
	"encoding/pem"
	"errors"
	"testing"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
)

// The checked-in seeds under testdata/fuzz/ hold odd shapes (CRLF, junk between blocks,
// truncated and corrupt blocks, DER). Seeds holding real private keys are minted here instead,
// so that no key ever sits in the repository.

var fuzzLimits = pki.Limits{MaxBytes: 1 << 16, MaxCerts: 16}

func FuzzParseCertificates(f *testing.F) {
	ca := certs.NewCA(f)
	leaf := ca.Intermediate(f).Leaf(f, certs.WithKeyType(certs.Ed25519))
	f.Add(leaf.ChainPEM())
	f.Add(leaf.Cert.Raw)
	f.Add(bytes.Join([][]byte{leaf.CertPEM, leaf.KeyPEM}, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := pki.ParseCertificates(data, fuzzLimits)
		if len(data) > fuzzLimits.MaxBytes && !errors.Is(err, pki.ErrTooLarge) {
			t.Fatalf("%d bytes accepted over a limit of %d", len(data), fuzzLimits.MaxBytes)
		}
		if err != nil {
			if got != nil {
				t.Fatalf("certificates returned with an error")
			}
			return
		}
		if len(got) == 0 || len(got) > fuzzLimits.MaxCerts {
			t.Fatalf("%d certificates returned without error", len(got))
		}
		for i, c := range got {
			if c == nil || len(c.Raw) == 0 {
				t.Fatalf("certificate %d is empty", i)
			}
			// Everything downstream calls these on parsed certificates: none may panic.
			_ = pki.Summarize(c)
			_ = pki.WeakCrypto(c, 0)
			_ = pki.SelfSigned(c)
			_ = pki.CoversHost(c, "a.example.com")
		}
		_ = pki.CheckBundle(got, ca.Cert.NotBefore, 2)
		_ = pki.CheckServedChain(got, nil, ca.Cert.NotBefore)
	})
}

func FuzzParsePrivateKey(f *testing.F) {
	ca := certs.NewCA(f)
	for _, o := range [][]certs.Option{
		{certs.WithKeyType(certs.RSA1024), certs.WithKeyFormat(certs.PKCS1)},
		{certs.WithKeyType(certs.RSA1024), certs.WithKeyFormat(certs.PKCS8)},
		{certs.WithKeyFormat(certs.SEC1)},
		{certs.WithKeyFormat(certs.PKCS8)},
		{certs.WithKeyType(certs.Ed25519)},
	} {
		l := ca.Leaf(f, o...)
		f.Add(l.KeyPEM)
		if b, _ := pem.Decode(l.KeyPEM); b != nil {
			f.Add(b.Bytes)
		}
		f.Add(bytes.ReplaceAll(l.KeyPEM, []byte("\n"), []byte("\r\n")))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := pki.ParsePrivateKey(data, fuzzLimits)
		if err != nil {
			if len(err.Error()) > 300 {
				t.Fatalf("error message is %d bytes; errors must not quote input", len(err.Error()))
			}
			if len(data) >= 16 && bytes.Contains([]byte(err.Error()), data) {
				t.Fatalf("error message quotes the input")
			}
			return
		}
		if info.Public == nil {
			t.Fatalf("key parsed without a public half")
		}
		switch info.Algorithm {
		case "RSA", "ECDSA", "Ed25519":
		default:
			t.Fatalf("unexpected algorithm %q", info.Algorithm)
		}
		switch info.Format {
		case "PKCS#1", "PKCS#8", "SEC1":
		default:
			t.Fatalf("unexpected format %q", info.Format)
		}
	})
}

func FuzzParseSerial(f *testing.F) {
	for _, s := range []string{"0a1b", "00:8A:0B:CD", "0x8a", "0X8A", " 8a \n", "0", "-1", "+1", "", "0x", ":::", "8a_0b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := pki.ParseSerial(s)
		if err != nil {
			if len(err.Error()) > 300 {
				t.Fatalf("error message is %d bytes", len(err.Error()))
			}
			return
		}
		if n.Sign() < 0 {
			t.Fatalf("negative serial %v from %q", n, s)
		}
		back, err := pki.ParseSerial(pki.SerialHex(n))
		if err != nil || !pki.SerialsEqual(n, back) {
			t.Fatalf("SerialHex(%v) = %q does not parse back (%v)", n, pki.SerialHex(n), err)
		}
	})
}
