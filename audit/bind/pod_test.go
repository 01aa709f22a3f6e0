package bind

import (
	"crypto/x509"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/ref"
)

func TestFillSNIs(t *testing.T) {
	names := DesiredNames([]desired.Observation{
		{Ref: ref.Source{Kind: ref.Secret, Namespace: "a", Name: "web"}, Items: []desired.Item{{Chain: []*x509.Certificate{{DNSNames: []string{"web.example", "*.web.example", "alt.example"}}}}}},
		{Ref: ref.Source{Kind: ref.Secret, Namespace: "a", Name: "other"}, Items: []desired.Item{{Chain: []*x509.Certificate{{DNSNames: []string{"other.example"}}}}}},
		{Ref: ref.Source{Kind: ref.Secret, Namespace: "a", Name: "broken"}, Items: []desired.Item{{}}},
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
	obs := []desired.Observation{
		{Ref: ref.Source{Kind: ref.Secret, Namespace: "gw", Name: "with-ca"}, Items: []desired.Item{{CA: []*x509.Certificate{ca}}}},
		{Ref: ref.Source{Kind: ref.Secret, Namespace: "gw", Name: "no-ca"}, Items: []desired.Item{{}}},
		{Ref: ref.Source{Kind: ref.ConfigMap, Namespace: "gw", Name: "bundle"}, Items: []desired.Item{{CA: []*x509.Certificate{ca}}}},
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
