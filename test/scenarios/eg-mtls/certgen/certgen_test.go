package certgen

import (
	"crypto/x509"
	"math/big"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBundleCAs(t *testing.T) {
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	ca := func(serial int64, notAfter time.Time) *x509.Certificate {
		return &x509.Certificate{SerialNumber: big.NewInt(serial), Raw: []byte{byte(serial)}, NotAfter: notAfter}
	}
	later, earlier := now.Add(time.Hour), now.Add(-time.Hour)
	newCA := ca(3, later)
	cases := map[string]struct {
		reason string
		old    []*x509.Certificate
		want   []int64
	}{
		"FirstRotation":    {reason: "the old CA is carried over", old: []*x509.Certificate{ca(1, later)}, want: []int64{3, 1}},
		"AtMostTwo":        {reason: "only the first old CA is kept", old: []*x509.Certificate{ca(2, later), ca(1, later)}, want: []int64{3, 2}},
		"ExpiredSkipped":   {reason: "an expired old CA is dropped", old: []*x509.Certificate{ca(2, earlier), ca(1, later)}, want: []int64{3, 1}},
		"DuplicateSkipped": {reason: "the new CA is not added twice", old: []*x509.Certificate{ca(3, later)}, want: []int64{3}},
		"NoOldBundle":      {reason: "nothing to carry", want: []int64{3}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []int64
			for _, c := range BundleCAs(newCA, tc.old, now) {
				got = append(got, c.SerialNumber.Int64())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: BundleCAs serials (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestParseCAsSkipsGarbage(t *testing.T) {
	if got := parseCAs([]byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")); len(got) != 0 {
		t.Errorf("parseCAs of a broken PEM certificate: %d certificates, want 0", len(got))
	}
}
