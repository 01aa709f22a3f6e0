package config

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseReportsEveryError: decoding goes on past a bad duration and values of the wrong type,
// and every problem names its line and field, whether the decoder or the validation found it.
func TestLoadReportsEveryError(t *testing.T) {
	_, err := Load(filepath.Join("testdata", "three_errors.yaml"))
	var es Errors
	if !errors.As(err, &es) || len(es) != 3 {
		t.Fatalf("Load(three_errors.yaml): %v, want three config.Errors", err)
	}
}

func TestParseReportsEveryError(t *testing.T) {
	type at struct {
		Line  int
		Field string
	}
	tests := map[string]struct {
		reason string
		yaml   string
		want   []at
	}{
		"ThreeBadValues": {
			reason: "a bad duration, a number that is a word and a list where a string goes: three errors",
			yaml: `desired:
  - name: web
    dir: /etc/tls
envoys:
  - name: edge
    admin: http://127.0.0.1:9901
    endpoints:
      - address: [not, a, string]
policy:
  grace: 2 minutes
  max_bundle_cas: two
`,
			want: []at{{8, "envoys[0].endpoints[0].address"}, {10, "policy.grace"}, {11, "policy.max_bundle_cas"}},
		},
		"DecodeAndValidate": {
			reason: "an unknown field, a negative duration and a dangling reference, in line order",
			yaml: `desired:
  - name: web
    dir: /etc/tls
    cert_flie: tls.crt
envoys:
  - name: edge
    endpoints:
      - {address: "127.0.0.1:8443", source: nope}
policy: {timeout: -1s, expiring_warning: 1h, expiring_critical: 1h}
`,
			want: []at{{4, "desired[0].cert_flie"}, {8, "envoys[0].endpoints[0]"}, {9, "policy.timeout"}},
		},
		"BadDurationsInFlow": {
			reason: "two bad durations on one line are told apart by their values",
			yaml:   "desired: [{name: web, dir: /d}]\npolicy: {grace: soon, timeout: 3 parsecs}\n",
			want:   []at{{2, "policy.grace"}, {2, "policy.timeout"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("%s: error %v (%T), want config.Errors", tc.reason, err, err)
			}
			var got []at
			for _, e := range es {
				got = append(got, at{e.Line, e.Field})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: -want +got:\n%s\nerror:\n%v", tc.reason, diff, err)
			}
		})
	}
}
