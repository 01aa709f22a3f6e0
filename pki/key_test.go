package pki_test

import (
	"bytes"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
)

func TestParsePrivateKey(t *testing.T) {
	ca := certs.NewCA(t)
	type keyCase struct {
		kt      certs.KeyType
		format  certs.KeyFormat
		wantAlg string
		wantFmt string
	}
	shapes := map[string]keyCase{
		"RSAPKCS1":     {certs.RSA2048, certs.PKCS1, "RSA", "PKCS#1"},
		"RSAPKCS8":     {certs.RSA2048, certs.PKCS8, "RSA", "PKCS#8"},
		"ECDSASEC1":    {certs.ECDSAP256, certs.SEC1, "ECDSA", "SEC1"},
		"ECDSAPKCS8":   {certs.ECDSAP256, certs.PKCS8, "ECDSA", "PKCS#8"},
		"ECDSAP384":    {certs.ECDSAP384, certs.SEC1, "ECDSA", "SEC1"},
		"Ed25519PKCS8": {certs.Ed25519, certs.PKCS8, "Ed25519", "PKCS#8"},
	}
	for name, kc := range shapes {
		leaf := ca.Leaf(t, certs.WithKeyType(kc.kt), certs.WithKeyFormat(kc.format))
		block, _ := pem.Decode(leaf.KeyPEM)
		inputs := map[string][]byte{
			"PEM":          leaf.KeyPEM,
			"DER":          block.Bytes,
			"CRLF":         bytes.ReplaceAll(leaf.KeyPEM, []byte("\n"), []byte("\r\n")),
			"AfterCert":    append(append([]byte{}, leaf.CertPEM...), leaf.KeyPEM...),
			"AfterECParam": append([]byte("-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"), leaf.KeyPEM...),
		}
		for shape, in := range inputs {
			t.Run(name+"/"+shape, func(t *testing.T) {
				info, err := pki.ParsePrivateKey(in, pki.Limits{})
				if err != nil {
					t.Fatalf("ParsePrivateKey: %v", err)
				}
				if info.Algorithm != kc.wantAlg || info.Format != kc.wantFmt {
					t.Errorf("got %s/%s, want %s/%s", info.Algorithm, info.Format, kc.wantAlg, kc.wantFmt)
				}
				if !pki.KeyMatches(leaf.Cert, info.Public) {
					t.Errorf("key does not match its own certificate")
				}
			})
		}
	}
}

func TestParsePrivateKeyRefuses(t *testing.T) {
	ca := certs.NewCA(t)
	ecLeaf := ca.Leaf(t, certs.WithKeyFormat(certs.SEC1))
	ecBlock, _ := pem.Decode(ecLeaf.KeyPEM)
	rsaLeaf := ca.Leaf(t, certs.WithKeyType(certs.RSA2048), certs.WithKeyFormat(certs.PKCS8))
	rsaBlock, _ := pem.Decode(rsaLeaf.KeyPEM)

	legacyEncrypted := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
		Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-256-CBC,00112233445566778899AABBCCDDEEFF"},
		Bytes:   bytes.Repeat([]byte{0x5a}, 64)})
	pkcs8Encrypted := pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: bytes.Repeat([]byte{0x5a}, 64)})
	// A label that says RSA around an EC key: Envoy (BoringSSL) refuses it, so do we.
	mislabelled := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: ecBlock.Bytes})
	truncatedDER := rsaBlock.Bytes[:len(rsaBlock.Bytes)/2]

	cases := map[string]struct {
		reason  string
		in      []byte
		wantErr error
		mention string // a word the error must contain
	}{
		"LegacyEncrypted": {reason: "OpenSSL Proc-Type encrypted key", in: legacyEncrypted, mention: "encrypted"},
		"PKCS8Encrypted":  {reason: "ENCRYPTED PRIVATE KEY", in: pkcs8Encrypted, mention: "encrypted"},
		"Mislabelled":     {reason: "EC key in an RSA PRIVATE KEY block", in: mislabelled, mention: "RSA PRIVATE KEY"},
		"CertOnly":        {reason: "a certificate given as key", in: ecLeaf.CertPEM, mention: "no private key"},
		"TruncatedDER":    {reason: "half a key", in: truncatedDER, mention: "not a PEM or DER"},
		"Empty":           {reason: "nothing", in: nil, mention: "not a PEM or DER"},
		"TooLarge":        {reason: "over the limit", in: bytes.Repeat([]byte("A"), pki.DefaultLimits.MaxBytes+1), wantErr: pki.ErrTooLarge},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			info, err := pki.ParsePrivateKey(tc.in, pki.Limits{})
			if err == nil {
				t.Fatalf("%s: parsed a %s key, want an error", tc.reason, info.Algorithm)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: error = %v, want %v", tc.reason, err, tc.wantErr)
			}
			if tc.mention != "" && !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("%s: error %q does not mention %q", tc.reason, err, tc.mention)
			}
			assertNoKeyMaterial(t, err.Error(), ecLeaf.KeyPEM, rsaLeaf.KeyPEM)
		})
	}
}

// assertNoKeyMaterial fails if msg holds any 16-character run of a key PEM's base64 body. It
// never prints the key itself.
func assertNoKeyMaterial(t *testing.T, msg string, keys ...[]byte) {
	t.Helper()
	for _, k := range keys {
		body := strings.Join(strings.Split(string(k), "\n")[1:], "")
		for i := 0; i+16 <= len(body); i += 8 {
			if strings.Contains(msg, body[i:i+16]) {
				t.Fatalf("error message contains private key material (%d bytes of message withheld)", len(msg))
			}
		}
	}
}

func TestKeyMatches(t *testing.T) {
	ca := certs.NewCA(t)
	ec := ca.Leaf(t)
	ec2 := ca.Leaf(t)
	rsaA := ca.Leaf(t, certs.WithKeyType(certs.RSA2048))
	rsaB := ca.Leaf(t, certs.WithKeyType(certs.RSA2048), certs.WithFreshKey())
	ed := ca.Leaf(t, certs.WithKeyType(certs.Ed25519))
	renewed := ca.Leaf(t, certs.WithKey(ec.Key))

	pub := func(l *certs.Leaf) any {
		info, err := pki.ParsePrivateKey(l.KeyPEM, pki.Limits{})
		if err != nil {
			t.Fatalf("parse key: %v", err)
		}
		return info.Public
	}
	cases := map[string]struct {
		leaf *certs.Leaf
		key  any
		want bool
	}{
		"ECDSAOwnKey":     {ec, pub(ec), true},
		"ECDSAOtherKey":   {ec, pub(ec2), false},
		"RSAOwnKey":       {rsaA, pub(rsaA), true},
		"RSAOtherKey":     {rsaA, pub(rsaB), false},
		"Ed25519OwnKey":   {ed, pub(ed), true},
		"TypeMismatch":    {ed, pub(ec), false},
		"RenewalKeepsKey": {renewed, pub(ec), true},
		"NilKey":          {ec, nil, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := pki.KeyMatches(tc.leaf.Cert, tc.key); got != tc.want {
				t.Errorf("KeyMatches = %v, want %v", got, tc.want)
			}
		})
	}
	if pki.KeyMatches(nil, pub(ec)) {
		t.Errorf("KeyMatches(nil cert) = true")
	}
}
