package remediate

import (
	"strings"
	"testing"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/certs"
)

// TestCheckConverged pins the post-check: a replacement passes only when it was observed, every
// binding is converged, no stale finding names it, and each handshake returns the desired leaf.
func TestCheckConverged(t *testing.T) {
	ca := certs.NewCA(t)
	want, old := ca.Leaf(t, certs.WithDNSNames("web.example.com")), ca.Leaf(t, certs.WithDNSNames("web.example.com"))
	desired := []desired.Observation{{Ref: ref.Source{Kind: ref.Secret, Namespace: "ns", Name: "web-tls"}, Items: []desired.Item{{Chain: want.Chain()}}}}
	view := func(leaf *certs.Leaf) audit.EnvoyView {
		r := tlsprobe.Result{Target: tlsprobe.Target{Address: "10.0.0.9:8443"}}
		if leaf != nil {
			r.Chain = leaf.Chain()
		}
		return audit.EnvoyView{Config: config.Envoy{Name: "ns/web-new"}, Served: []tlsprobe.Result{r}}
	}
	converged := []audit.Binding{{Envoy: "ns/web-new", Source: "ns/web-tls", State: audit.StateConverged}}
	cases := map[string]struct {
		reason   string
		envoys   []audit.EnvoyView
		bindings []audit.Binding
		findings []audit.Finding
		wantErr  string
	}{
		"Converged":       {reason: "serves the desired leaf", envoys: []audit.EnvoyView{view(want)}, bindings: converged},
		"NotObserved":     {reason: "not discovered yet", bindings: converged, wantErr: "not observed"},
		"NoBinding":       {reason: "admin not read yet", envoys: []audit.EnvoyView{view(want)}, wantErr: "no certificate binding"},
		"ServesOldLeaf":   {reason: "the handshake returns the old leaf", envoys: []audit.EnvoyView{view(old)}, bindings: converged, wantErr: "not the desired certificate"},
		"HandshakeFailed": {reason: "no chain received", envoys: []audit.EnvoyView{view(nil)}, bindings: converged, wantErr: "handshake"},
		"StaleFinding": {reason: "the audit still finds it stale", envoys: []audit.EnvoyView{view(want)}, bindings: converged,
			findings: []audit.Finding{{Code: audit.StaleLoaded, Subject: audit.Subject{Envoy: "ns/web-new"}}}, wantErr: "STALE_LOADED"},
		"Converging": {reason: "a binding not yet converged", envoys: []audit.EnvoyView{view(want)},
			bindings: []audit.Binding{{Envoy: "ns/web-new", Source: "ns/web-tls", State: audit.StateConverging}}, wantErr: "converging"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			saw, err := CheckConverged(audit.Inputs{Desired: desired, Envoys: tc.envoys},
				audit.Report{Bindings: tc.bindings, Findings: tc.findings}, []string{"ns/web-new"})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("%s: unexpected error %v", tc.reason, err)
			case tc.wantErr == "" && !strings.Contains(saw, "serves the desired leaf of ns/web-tls"):
				t.Errorf("%s: saw %q", tc.reason, saw)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("%s: err %v, want one mentioning %q", tc.reason, err, tc.wantErr)
			}
		})
	}
}
