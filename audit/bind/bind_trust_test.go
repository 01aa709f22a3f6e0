package bind

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/certs"
)

// TestProbeEndpoints: handshakes never wait on the admin. The annotation wins; a config_dump that
// was read says which listeners are TLS; without it (admin unreachable, or no admin at all) the
// pod spec's TLS-looking ports are probed, never the admin or stats port.
func TestProbeEndpoints(t *testing.T) {
	ports := []kube.ContainerPort{{Name: "http", Port: 8080}, {Name: "https", Port: 8443}, {Name: "admin", Port: 9901},
		{Name: "grpc-tls", Port: 7000}, {Port: 10443}, {Name: "metrics", Port: 19001}, {Name: "https-dup", Port: 8443}}
	base := kube.EnvoyTarget{Namespace: "a", Pod: "p", PodIP: "10.0.0.1", AdminPort: 9901, StatsPort: 19001, ContainerPorts: ports}
	unreachable := &envoystate.Snapshot{CertsErr: errAdmin, ConfigErr: errAdmin, StatsErr: errAdmin}
	spec := []config.Endpoint{{Address: "10.0.0.1:7000"}, {Address: "10.0.0.1:8443"}, {Address: "10.0.0.1:10443"}}
	cases := map[string]struct {
		reason string
		target func(kube.EnvoyTarget) kube.EnvoyTarget
		snap   *envoystate.Snapshot
		want   []config.Endpoint
	}{
		"AdminUnreachable": {
			reason: "an admin that cannot be read (localhost-only, direct access) leaves the spec's TLS ports",
			snap:   unreachable, want: spec,
		},
		"NoAdmin": {
			reason: "a pod with no admin at all is probed on its spec's TLS ports",
			want:   spec,
		},
		"AdminListeners": {
			reason: "a config_dump that was read says which ports are TLS, with their server names",
			snap:   &envoystate.Snapshot{Listeners: []envoystate.FilterChainTLS{{Address: "0.0.0.0:8443", ServerNames: []string{"web.example"}}}},
			want:   []config.Endpoint{{Address: "10.0.0.1:8443", SNI: []string{"web.example"}}},
		},
		"AdminNoTLSListener": {
			reason: "a config_dump that was read and shows no TLS listener: nothing to handshake, whatever ports are named",
			snap:   &envoystate.Snapshot{},
		},
		"Annotation": {
			reason: "certdrift.dev/probe-ports wins over the admin and the spec",
			target: func(t kube.EnvoyTarget) kube.EnvoyTarget {
				t.ProbePorts = []kube.ProbePort{{Port: 9443, SNIs: []string{"x.example"}}}
				return t
			},
			snap: unreachable,
			want: []config.Endpoint{{Address: "10.0.0.1:9443", SNI: []string{"x.example"}}},
		},
		"NoPodIP": {
			reason: "no pod IP, nothing to dial",
			target: func(t kube.EnvoyTarget) kube.EnvoyTarget { t.PodIP = ""; return t },
			snap:   unreachable,
		},
		"NoTLSLookingPort": {
			reason: "ports not named or numbered like TLS are left out: a handshake with a plaintext listener would only fail",
			target: func(t kube.EnvoyTarget) kube.EnvoyTarget {
				t.ContainerPorts = []kube.ContainerPort{{Name: "http", Port: 8080}, {Name: "admin", Port: 9901}}
				return t
			},
			snap: unreachable,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tg := base
			if tc.target != nil {
				tg = tc.target(tg)
			}
			if diff := cmp.Diff(tc.want, ProbeEndpoints(tg, tc.snap), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nProbeEndpoints(): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

type adminError struct{}

func (adminError) Error() string { return "dial 10.0.0.1:9901: connection refused" }

var errAdmin error = adminError{}

// TestSDSRefsAndTrust: SDS names refer to Secrets to read (a -cacert name to both its Secrets),
// and a resolved trust bundle becomes a binding of the source holding it under the validation
// secret's name.
func TestSDSRefsAndTrust(t *testing.T) {
	tg := kube.EnvoyTarget{Namespace: "istio-system", Pod: "gw"}
	snap := &envoystate.Snapshot{Secrets: []envoystate.Secret{
		{Name: "kubernetes://gw-cred", HasCertificate: true},
		{Name: "kubernetes://gw-cred-cacert", HasValidation: true},
		{Name: "default", HasCertificate: true},
		{Name: "ROOTCA", HasValidation: true},
	}}
	want := []ref.Source{{Kind: "Secret", Namespace: "istio-system", Name: "gw-cred"}, {Kind: "Secret", Namespace: "istio-system", Name: "gw-cred-cacert"}}
	if diff := cmp.Diff(want, SDSRefs(tg, snap)); diff != "" {
		t.Errorf("SDSRefs(): -want +got:\n%s", diff)
	}
	// gw-cred holds no CA, gw-cred-cacert does (an Opaque Secret read by name).
	lookup := func(src string) (bool, bool) {
		switch src {
		case "istio-system/gw-cred":
			return true, false
		case "istio-system/gw-cred-cacert":
			return true, true
		}
		return false, false
	}
	_, trust := SDSBindings(tg, snap, lookup)
	var got []config.Binding
	for _, tb := range trust {
		got = append(got, tb.Binding(tg))
	}
	wantB := []config.Binding{{Source: "istio-system/gw-cred-cacert", Secret: "kubernetes://gw-cred-cacert", Origin: audit.OriginSDSName}}
	if diff := cmp.Diff(wantB, got); diff != "" {
		t.Errorf("trust bindings: -want +got:\n%s", diff)
	}
	if got := SDSRefs(tg, nil); len(got) != 0 {
		t.Errorf("SDSRefs(no admin) = %v, want none", got)
	}
}

// TestKeysOf: the keys Bind uses come from what the inventory read, per item.
func TestKeysOf(t *testing.T) {
	snap := kube.Snapshot{
		Secrets: []*kube.SecretSummary{{Namespace: "a", Name: "ca-only", Items: []kube.ItemSummary{{CAKey: "ca.crt"}}},
			{Namespace: "a", Name: "merged", Items: []kube.ItemSummary{{Name: "x", CertKey: "x.crt", KeyKey: "x.key", CAKey: "ca.crt"}}}},
		ConfigMaps: []kube.ConfigMapSummary{{Namespace: "a", Name: "bundle", Bundles: []kube.KeyBundle{{Key: "root.pem"}}}},
	}
	want := SourceKeys{
		"a/ca-only":          {{CA: "ca.crt"}},
		"a/merged":           {{Item: "x", Cert: "x.crt", Key: "x.key", CA: "ca.crt"}},
		"configmap:a/bundle": {{Item: "root.pem", CA: "root.pem"}},
	}
	if diff := cmp.Diff(want, KeysOf(snap)); diff != "" {
		t.Errorf("KeysOf(): -want +got:\n%s", diff)
	}

	// The items of a merged Secret keep their leaf's names (what picks the item an SDS secret
	// watching their directory holds); a single item does not need them.
	ca := certs.NewCA(t)
	x, y := ca.Leaf(t, certs.WithDNSNames("x.example")), ca.Leaf(t, certs.WithDNSNames("y.example", "www.y.example"))
	two := kube.Snapshot{Secrets: []*kube.SecretSummary{{Namespace: "a", Name: "two", Items: []kube.ItemSummary{
		{Name: "x", CertKey: "x.crt", Chain: []kube.Cert{{DER: x.Cert.Raw}}}, {Name: "y", CertKey: "y.crt", Chain: []kube.Cert{{DER: y.Cert.Raw}}}}},
		{Namespace: "a", Name: "one", Items: []kube.ItemSummary{{CertKey: "tls.crt", Chain: []kube.Cert{{DER: x.Cert.Raw}}}}}}}
	want = SourceKeys{
		"a/two": {{Item: "x", Cert: "x.crt", Names: []string{"x.example"}}, {Item: "y", Cert: "y.crt", Names: []string{"y.example", "www.y.example"}}},
		"a/one": {{Cert: "tls.crt"}},
	}
	if diff := cmp.Diff(want, KeysOf(two)); diff != "" {
		t.Errorf("KeysOf(merged): -want +got:\n%s", diff)
	}
}
