package bind

import (
	"crypto/x509"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/files"
)

func TestFillSNIs(t *testing.T) {
	names := DesiredNames([]files.Observation{
		{Source: files.Source{Name: "a/web"}, Items: []files.Item{{Chain: []*x509.Certificate{{DNSNames: []string{"web.example", "*.web.example", "alt.example"}}}}}},
		{Source: files.Source{Name: "a/other"}, Items: []files.Item{{Chain: []*x509.Certificate{{DNSNames: []string{"other.example"}}}}}},
		{Source: files.Source{Name: "a/broken"}, Items: []files.Item{{}}},
	})
	tests := map[string]struct {
		reason   string
		eps      []config.Endpoint
		bindings []config.Binding
		want     []config.Endpoint
	}{
		"FromBoundSecret": {
			reason:   "an endpoint without SNIs gets the exact DNS names of the pod's bound Secrets",
			eps:      []config.Endpoint{{Address: "10.0.0.1:8443"}},
			bindings: []config.Binding{{Source: "a/web"}, {Source: "a/broken"}},
			want:     []config.Endpoint{{Address: "10.0.0.1:8443", SNI: []string{"web.example", "alt.example"}}},
		},
		"KeepsDeclared": {
			reason:   "SNIs from annotations or listeners are kept",
			eps:      []config.Endpoint{{Address: "10.0.0.1:8443", SNI: []string{"x.example"}}},
			bindings: []config.Binding{{Source: "a/web"}},
			want:     []config.Endpoint{{Address: "10.0.0.1:8443", SNI: []string{"x.example"}}},
		},
		"TrustBindingGivesNoSNI": {
			reason:   "a source bound only for its CA bundle (a peer's TLS Secret mounted for its ca.crt) says nothing about what the pod serves",
			eps:      []config.Endpoint{{Address: "10.0.0.1:8443"}},
			bindings: []config.Binding{{Source: "a/other", CAFile: "/certs/ca.crt"}, {Source: "a/web", File: "/certs/tls.crt", CAFile: "/certs/ca.crt"}},
			want:     []config.Endpoint{{Address: "10.0.0.1:8443", SNI: []string{"web.example", "alt.example"}}},
		},
		"NothingBound": {
			reason: "no binding: one handshake without SNI",
			eps:    []config.Endpoint{{Address: "10.0.0.1:8443"}},
			want:   []config.Endpoint{{Address: "10.0.0.1:8443"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fillSNIs(tc.eps, tc.bindings, names)
			if diff := cmp.Diff(tc.want, tc.eps, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestSecretLookup covers the index of the desired view that SDS names resolve against.
func TestSecretLookup(t *testing.T) {
	ca := &x509.Certificate{}
	obs := []files.Observation{
		{Source: files.Source{Name: "gw/with-ca"}, Items: []files.Item{{CA: []*x509.Certificate{ca}}}},
		{Source: files.Source{Name: "gw/no-ca"}, Items: []files.Item{{}}},
		{Source: files.Source{Name: "configmap:gw/bundle"}, Items: []files.Item{{CA: []*x509.Certificate{ca}}}},
	}
	lookup := Lookup(obs)
	cases := map[string]struct{ exists, hasCA bool }{
		"gw/with-ca": {true, true}, "gw/no-ca": {true, false}, "gw/bundle": {false, false}, "configmap:gw/bundle": {false, false}, "gw/absent": {false, false},
	}
	for src, want := range cases {
		if e, c := lookup(src); e != want.exists || c != want.hasCA {
			t.Errorf("lookup(%q) = %v, %v; want %v, %v", src, e, c, want.exists, want.hasCA)
		}
	}
}
