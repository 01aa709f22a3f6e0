package audit

import (
	"crypto/x509"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/test/certs"
)

// TestUnbound: a certificate an Envoy holds or serves that no desired source holds is a gap
// (UNBOUND), never a silent clean; leaves a binding accounts for and mesh identities are not.
func TestUnbound(t *testing.T) {
	f := newFixture(t)
	rotated := now.Add(-10 * time.Minute) // beyond the 2m default grace
	spiffe := f.ca.Leaf(t, certs.WithCommonName(""), certs.WithURIs("spiffe://cluster.local/ns/shop/sa/web"), certs.WithFreshKey(), certs.WithValidity(now.Add(-time.Hour), now.Add(23*time.Hour)))
	sdsSecret := func(name string, leaf *x509.Certificate) *envoystate.Snapshot {
		return &envoystate.Snapshot{AdminURL: "http://127.0.0.1:9901", Secrets: []envoystate.Secret{{Name: name, State: envoystate.SecretActive, HasCertificate: true, Chain: []*x509.Certificate{leaf}}}}
	}
	type want struct {
		Codes    []string
		ReadsOn  string // evidence reads_from of the UNBOUND finding
		SeenIn   string
		Complete bool
	}
	cases := map[string]struct {
		reason string
		in     Inputs
		want   want
	}{
		"FileNoSourceHolds": {
			reason: "a static context reads a file the configuration does not list: nothing to compare with",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", withContext(loadedFile(certPath, f.cur.Cert), "/srv/other/tls.crt", f.other.Cert), nil)}},
			want: want{Codes: []string{"UNBOUND warning"}, SeenIn: "file /srv/other/tls.crt"},
		},
		"ServedNoSourceHolds": {
			reason: "a handshake's leaf no binding claims, the same certificate as the unbound file: one finding, both places",
			in:     Inputs{Envoys: []EnvoyView{envoy("edge", loadedFile("/srv/other/tls.crt", f.other.Cert), ep, served("127.0.0.1:10000", "www.example.com", f.other.Cert))}},
			want:   want{Codes: []string{"HOSTNAME_MISMATCH critical", "UNBOUND warning"}, SeenIn: `file /srv/other/tls.crt; served at 127.0.0.1:10000 (SNI "www.example.com")`},
		},
		"SDSSecretOutsideInventory": {
			reason: "the pod names Secret shop/web-tls over SDS, which the inventory does not hold (filtered out): the finding says so",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{withBindings(envoy("shop/gw-0", sdsSecret("shop/web-tls", f.other.Cert), nil),
					config.Binding{Source: "shop/web-tls", Secret: "shop/web-tls", Origin: OriginSDSName})}},
			want: want{Codes: []string{"UNBOUND warning"}, ReadsOn: "shop/web-tls", SeenIn: `config_dump secret "shop/web-tls"`},
		},
		"MeshIdentity": {
			reason: "control: Istio's workload identity (spiffe:// only, SDS secret default) is rotated by the mesh agent, not held by a Secret",
			in:     Inputs{Envoys: []EnvoyView{envoy("shop/web-0", sdsSecret("default", spiffe.Cert), nil)}},
			want:   want{Complete: true},
		},
		"Bound": {
			reason: "control: the same file listed as a desired source is bound and judged",
			in: Inputs{Desired: []desired.Observation{desiredObs("other", f.other, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile("/etc/other/tls.crt", f.other.Cert), nil)}},
			want: want{Complete: true},
		},
		"AmbiguousButDesired": {
			reason: "control: two sources cover the SNI and the admin did not answer, so no binding says which; the leaf served is one of them, current: not unbound",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated), desiredObs("sibling", f.sibling, rotated)},
				Envoys: []EnvoyView{envoy("edge", nil, ep, served("127.0.0.1:10000", "www.example.com", f.cur.Cert))}},
			want: want{Complete: true},
		},
		"OldCopyOfABoundSource": {
			reason: "control: an old copy of a bound source (inferred by names) is that source's, judged stale, not unbound",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile("/somewhere/else.pem", f.old.Cert), nil)}},
			want: want{Codes: []string{"STALE_LOADED warning"}, Complete: true},
		},
		"OldCopyFoundByNames": {
			reason: "control: a bound source whose location the admin does not show; the SDS secret holding an old copy with its names is that source's (loadedByNames), judged stale, not unbound",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{withBindings(envoy("edge", sdsSecret("opaque-name", f.old.Cert), nil), config.Binding{Source: "web"})}},
			want: want{Codes: []string{"STALE_LOADED warning"}, Complete: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := Run(tc.in, config.DefaultPolicy, now)
			var g want
			for _, fd := range r.Findings {
				g.Codes = append(g.Codes, string(fd.Code)+" "+fd.Severity.String())
				if fd.Code == Unbound {
					g.ReadsOn, g.SeenIn = fd.Evidence["reads_from"], fd.Evidence["seen_in"]
				}
			}
			slices.Sort(g.Codes)
			g.Complete = r.Summary.Coverage.Complete
			if diff := cmp.Diff(tc.want, g); diff != "" {
				for _, fd := range r.Findings {
					t.Logf("%s %s: %s", fd.Code, fd.Severity, fd.Message)
				}
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
