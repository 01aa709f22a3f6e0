package pki_test

import (
	"encoding/hex"
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
)

func TestParseSerial(t *testing.T) {
	want := new(big.Int).SetBytes([]byte{0x8a, 0x0b, 0xcd, 0xef})
	cases := map[string]struct {
		in      string
		want    *big.Int
		wantErr bool
	}{
		"Lower":             {in: "8a0bcdef", want: want},
		"Upper":             {in: "8A0BCDEF", want: want},
		"LeadingZeroByte":   {in: "008a0bcdef", want: want},
		"ManyLeadingZeros":  {in: "00000000008A0BCDEF", want: want},
		"Colons":            {in: "8A:0B:CD:EF", want: want},
		"ColonsLeadingZero": {in: "00:8a:0b:cd:ef", want: want},
		"HexPrefix":         {in: "0x8a0bcdef", want: want},
		"Whitespace":        {in: "  8a0bcdef\n", want: want},
		"Zero":              {in: "0", want: big.NewInt(0)},
		"Empty":             {in: "", wantErr: true},
		"OnlyPrefix":        {in: "0x", wantErr: true},
		"NotHex":            {in: "xyz", wantErr: true},
		"Negative":          {in: "-8a0bcdef", wantErr: true},
		"Plus":              {in: "+8a0bcdef", wantErr: true},
		"Underscore":        {in: "8a_0b", wantErr: true},
		"Decimal":           {in: "1234.5", wantErr: true},
		"TooLong":           {in: strings.Repeat("a", 129), wantErr: true},
		"HugeInput":         {in: strings.Repeat("a", 1<<20), wantErr: true},
		"InnerSpace":        {in: "8a 0b", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := pki.ParseSerial(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseSerial(%.40q) = %v, want an error", tc.in, got)
				}
				if len(err.Error()) > 200 {
					t.Errorf("error message is %d bytes; it must quote a bounded prefix of the input", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSerial(%q): %v", tc.in, err)
			}
			if !pki.SerialsEqual(got, tc.want) {
				t.Errorf("ParseSerial(%q) = %s, want %s", tc.in, pki.SerialHex(got), pki.SerialHex(tc.want))
			}
		})
	}
}

func TestSerialRoundTripWithMintedCertificates(t *testing.T) {
	ca := certs.NewCA(t)
	for _, opt := range []certs.Option{certs.WithLeadingZeroSerial(), certs.WithSerial(big.NewInt(1)), certs.WithSerial(big.NewInt(0x0100))} {
		c := ca.Leaf(t, opt).Cert
		// Envoy prints the DER bytes in hex, keeping the leading zero byte; openssl upper-case
		// with colons. All must compare equal to the certificate's serial.
		der := c.SerialNumber.Bytes()
		if len(der) > 0 && der[0] >= 0x80 {
			der = append([]byte{0}, der...)
		}
		envoy := hexString(der, "")
		openssl := strings.ToUpper(hexString(der, ":"))
		for _, s := range []string{envoy, openssl, pki.SerialHex(c.SerialNumber)} {
			n, err := pki.ParseSerial(s)
			if err != nil || !pki.SerialsEqual(n, c.SerialNumber) {
				t.Errorf("serial %s parsed as %v (%v), want %s", s, n, err, pki.SerialHex(c.SerialNumber))
			}
		}
	}
}

func hexString(b []byte, sep string) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = hex.EncodeToString([]byte{x})
	}
	return strings.Join(parts, sep)
}

func TestSerialHexAndEqual(t *testing.T) {
	if got := pki.SerialHex(new(big.Int).SetBytes([]byte{0x00, 0x0a, 0xff})); got != "aff" {
		t.Errorf("SerialHex = %q, want %q (lower case, no leading zeros)", got, "aff")
	}
	if pki.SerialHex(nil) != "" {
		t.Errorf("SerialHex(nil) is not empty")
	}
	if pki.SerialsEqual(nil, nil) || pki.SerialsEqual(big.NewInt(1), nil) {
		t.Errorf("SerialsEqual with nil must be false")
	}
	if pki.SerialsEqual(big.NewInt(1), big.NewInt(2)) || !pki.SerialsEqual(big.NewInt(7), big.NewInt(7)) {
		t.Errorf("SerialsEqual compares values wrongly")
	}
}

func TestFingerprintAndSPKI(t *testing.T) {
	ca := certs.NewCA(t)
	a := ca.Leaf(t, certs.WithDNSNames("a.test"))
	renewed := ca.Leaf(t, certs.WithDNSNames("a.test"), certs.WithKey(a.Key))
	other := ca.Leaf(t, certs.WithDNSNames("a.test"))
	if len(pki.Fingerprint(a.Cert)) != 64 || strings.ToLower(pki.Fingerprint(a.Cert)) != pki.Fingerprint(a.Cert) {
		t.Errorf("Fingerprint %q is not 64 lower-case hex digits", pki.Fingerprint(a.Cert))
	}
	if pki.Fingerprint(a.Cert) == pki.Fingerprint(renewed.Cert) {
		t.Errorf("a renewal has the same fingerprint")
	}
	if pki.SPKIHash(a.Cert) != pki.SPKIHash(renewed.Cert) {
		t.Errorf("a renewal that kept its key has a different SPKI hash")
	}
	if pki.SPKIHash(a.Cert) == pki.SPKIHash(other.Cert) {
		t.Errorf("two keys have the same SPKI hash")
	}
}

func TestSummarize(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("Summary CA"))
	l := ca.Leaf(t, certs.WithCommonName("svc"), certs.WithDNSNames("svc.test", "*.svc.test"),
		certs.WithURIs("spiffe://td/ns/a/sa/b"), certs.WithIPs("10.1.2.3"), certs.WithKeyType(certs.RSA2048),
		certs.WithSerial(big.NewInt(0x0abc)))
	got := pki.Summarize(l.Cert)
	want := pki.Summary{
		FingerprintSHA256: pki.Fingerprint(l.Cert),
		SPKISHA256:        pki.SPKIHash(l.Cert),
		Serial:            "abc",
		Subject:           "CN=svc,O=certdrift tests",
		CommonName:        "svc",
		Issuer:            ca.Cert.Subject.String(),
		NotBefore:         l.Cert.NotBefore.UTC(),
		NotAfter:          l.Cert.NotAfter.UTC(),
		DNSNames:          []string{"svc.test", "*.svc.test"},
		URIs:              []string{"spiffe://td/ns/a/sa/b"},
		IPs:               []string{"10.1.2.3"},
		KeyAlgorithm:      "RSA-2048",
		SignatureAlgo:     l.Cert.SignatureAlgorithm.String(),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Summarize (-want +got):\n%s", diff)
	}
	if !pki.Summarize(ca.Cert).IsCA {
		t.Errorf("Summarize(CA).IsCA = false")
	}
	b, err := json.Marshal(got)
	if err != nil || !strings.Contains(string(b), `"fingerprint_sha256":"`+want.FingerprintSHA256+`"`) {
		t.Errorf("JSON form %s (err %v) lacks fingerprint_sha256", b, err)
	}
	if diff := cmp.Diff(pki.Summary{}, pki.Summarize(nil)); diff != "" {
		t.Errorf("Summarize(nil) is not zero:\n%s", diff)
	}
	for kt, want := range map[certs.KeyType]string{certs.ECDSAP256: "ECDSA-P256", certs.ECDSAP384: "ECDSA-P384", certs.Ed25519: "Ed25519", certs.RSA1024: "RSA-1024"} {
		if got := pki.KeyAlgorithm(ca.Leaf(t, certs.WithKeyType(kt)).Cert); got != want {
			t.Errorf("KeyAlgorithm(%v) = %q, want %q", kt, got, want)
		}
	}
}
