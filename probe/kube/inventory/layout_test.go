package inventory

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseLayout: the --secret-layout syntax, read into a Layout or refused with a reason. The
// command's tests check that a refusal is a usage error naming the flag.
func TestParseLayout(t *testing.T) {
	cases := map[string]struct {
		reason  string
		in      string
		want    Layout
		wantErr string
	}{
		"IstioGeneric":   {reason: "all three keys", in: "cert=cert,key=key,ca=cacert", want: Layout{Cert: "cert", Key: "key", CA: "cacert"}},
		"AnyOrderSpaces": {reason: "order and spaces do not matter", in: " ca=ca.crt, key=*.key , cert=*.crt", want: Layout{Cert: "*.crt", Key: "*.key", CA: "ca.crt"}},
		"CertAlone":      {reason: "key and ca are optional", in: "cert=bundle.pem", want: Layout{Cert: "bundle.pem"}},
		"CAOnly":         {reason: "a trust-bundle Secret", in: "ca=ca.crt", want: Layout{CA: "ca.crt"}},
		"NoCert":         {reason: "a key without its certificate", in: "key=tls.key", wantErr: "cert=<key> is required"},
		"KeyWithCAOnly":  {reason: "a CA-only layout has no key", in: "ca=ca.crt,key=tls.key", wantErr: "key=<key> needs cert=<key>"},
		"CAStar":         {reason: "a CA bundle has no item names", in: "ca=*.crt", wantErr: "none in ca"},
		"UnknownName":    {reason: "only cert, key and ca", in: "cert=a,chain=b", wantErr: `"chain": want cert, key or ca`},
		"StarMismatch":   {reason: "items pair cert and key by name", in: "cert=*.crt,key=tls.key", wantErr: "both have a *"},
		"TwoStars":       {reason: "one item name per key", in: "cert=*.*", wantErr: "at most one *"},
		"NotAKey":        {reason: "a Secret key has no slash", in: "cert=a/b", wantErr: "not a Secret key"},
		"Twice":          {reason: "a name given twice is ambiguous", in: "cert=a,cert=b", wantErr: "cert given twice"},
		"NoValue":        {reason: "name=key", in: "cert=", wantErr: "want name=key"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseLayout(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s: ParseLayout(%q) error %v, want one containing %q", tc.reason, tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: ParseLayout(%q): %v", tc.reason, tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: ParseLayout(%q) -want +got:\n%s", tc.reason, tc.in, diff)
			}
		})
	}
}
