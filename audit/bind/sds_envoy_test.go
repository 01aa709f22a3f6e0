package bind

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoyadmin"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

// TestSDSBindingsRealEnvoy runs the real Envoy with secrets named the way Istio's gateways and
// Envoy Gateway name them (delivered by file here; the names are what matters), reads its admin
// and binds what it reports: the config_dump and listener names as this Envoy version prints them.
func TestSDSBindingsRealEnvoy(t *testing.T) {
	ca := certs.NewCA(t)
	dir := t.TempDir()
	type sec struct{ name, sni string }
	secrets := []sec{
		{"kubernetes://web-cred", "web.example.com"},
		{"kubernetes-gateway://apps/gw-cred", "gw.example.com"},
		{"envoy-gateway/tls-foo", "foo.example.com"},
	}
	const caName = "kubernetes://web-cred-cacert"
	certs.WriteFiles(t, dir, map[string][]byte{"ca.crt": ca.CertPEM})
	caSDS := filepath.Join(dir, "ca.json")
	if err := os.WriteFile(caSDS, envoytest.ValidationSecret(caName, filepath.Join(dir, "ca.crt"), ""), 0o600); err != nil {
		t.Fatal(err)
	}
	var chains []envoytest.Chain
	for i, s := range secrets {
		leaf := ca.Leaf(t, certs.WithDNSNames(s.sni))
		sub := filepath.Join(dir, "c"+string(rune('0'+i)))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		certs.WriteFiles(t, sub, map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM})
		p := filepath.Join(sub, "sds.json")
		if err := os.WriteFile(p, envoytest.TLSSecret(s.name, filepath.Join(sub, "tls.crt"), filepath.Join(sub, "tls.key"), ""), 0o600); err != nil {
			t.Fatal(err)
		}
		ch := envoytest.Chain{Name: s.sni, ServerNames: []string{s.sni}, SDS: &envoytest.SDSRef{Name: s.name, Path: p}}
		if i == 0 {
			ch.ClientCASDS = &envoytest.SDSRef{Name: caName, Path: caSDS}
		}
		chains = append(chains, ch)
	}
	e := envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.Bootstrap(envoytest.Listener{Chains: chains})})
	c, err := envoyadmin.New(e.AdminURL, envoyadmin.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	snap := c.Snapshot(context.Background())
	if snap.ConfigErr != nil {
		t.Fatalf("config_dump of Envoy %s: %v", e.Version(), snap.ConfigErr)
	}
	inv := inventoryOf(map[string]bool{"istio-system/web-cred": true, "apps/gw-cred": false})

	cases := map[string]struct {
		reason    string
		target    kube.EnvoyTarget
		want      []config.Binding
		wantTrust []TrustBinding
	}{
		"IstioGateway": {
			reason: "an Istio gateway binds its kubernetes:// names; the plain Envoy Gateway name binds nothing (not in the inventory, not an Envoy Gateway pod)",
			target: kube.EnvoyTarget{Namespace: "istio-system", Pod: "istio-ingressgateway-1", Preset: kube.PresetIstio},
			want: []config.Binding{
				{Source: "istio-system/web-cred", Secret: "kubernetes://web-cred", Origin: audit.OriginSDSName},
				{Source: "apps/gw-cred", Secret: "kubernetes-gateway://apps/gw-cred", Origin: audit.OriginSDSName},
			},
			wantTrust: []TrustBinding{{Secret: caName, Source: "istio-system/web-cred"}},
		},
		"EnvoyGatewayProxy": {
			reason: "an Envoy Gateway proxy binds ns/name too",
			target: kube.EnvoyTarget{Namespace: "envoy-gateway-system", Pod: "envoy-1", Preset: kube.PresetEnvoyGateway},
			want: []config.Binding{
				{Source: "envoy-gateway-system/web-cred", Secret: "kubernetes://web-cred", Origin: audit.OriginSDSName},
				{Source: "apps/gw-cred", Secret: "kubernetes-gateway://apps/gw-cred", Origin: audit.OriginSDSName},
				{Source: "envoy-gateway/tls-foo", Secret: "envoy-gateway/tls-foo", Origin: audit.OriginSDSName},
			},
			wantTrust: []TrustBinding{{Secret: caName, Source: "envoy-gateway-system/web-cred", Missing: true}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, trust := SDSBindings(tc.target, snap, inv)
			sortB := cmpopts.SortSlices(func(a, b config.Binding) bool { return a.Secret < b.Secret })
			if diff := cmp.Diff(tc.want, got, sortB, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nEnvoy %s: SDSBindings(): -want +got:\n%s", tc.reason, e.Version(), diff)
			}
			if diff := cmp.Diff(tc.wantTrust, trust, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nEnvoy %s: trust: -want +got:\n%s", tc.reason, e.Version(), diff)
			}
		})
	}
}
