package bind

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"sigs.k8s.io/yaml"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoyadmin"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/kube"
)

func TestParseSDSName(t *testing.T) {
	cases := map[string]struct {
		reason string
		name   string
		want   SDSRef
		wantOK bool
	}{
		"IstioLocal": {reason: "kubernetes://name is the Secret in the proxy's namespace",
			name: "kubernetes://web-cred", want: SDSRef{Kind: SDSCertificate, Namespace: "gw", Name: "web-cred", Scheme: "kubernetes"}, wantOK: true},
		"IstioNamespaced": {reason: "kubernetes://ns/name names its namespace",
			name: "kubernetes://apps/web-cred", want: SDSRef{Kind: SDSCertificate, Namespace: "apps", Name: "web-cred", Scheme: "kubernetes"}, wantOK: true},
		"IstioGatewayAPI": {reason: "kubernetes-gateway://ns/name is a Gateway API certificateRef",
			name: "kubernetes-gateway://apps/web-cred", want: SDSRef{Kind: SDSCertificate, Namespace: "apps", Name: "web-cred", Scheme: "kubernetes-gateway"}, wantOK: true},
		"IstioGatewayAPINoNamespace": {reason: "Gateway API names always carry a namespace",
			name: "kubernetes-gateway://web-cred"},
		"IstioCACert": {reason: "-cacert is the CA part of the Secret without the suffix, or the Secret with it",
			name: "kubernetes://web-cred-cacert", want: SDSRef{Kind: SDSTrust, Namespace: "gw", Name: "web-cred", Fallback: "web-cred-cacert", Scheme: "kubernetes"}, wantOK: true},
		"IstioCACertNamespaced": {reason: "-cacert keeps the namespace",
			name: "kubernetes-gateway://apps/web-cred-cacert", want: SDSRef{Kind: SDSTrust, Namespace: "apps", Name: "web-cred", Fallback: "web-cred-cacert", Scheme: "kubernetes-gateway"}, wantOK: true},
		"IstioOnlySuffix": {reason: "a name that is only the suffix is a plain Secret name",
			name: "kubernetes://-cacert"},
		"Default":  {reason: "istio-agent's workload certificate: no Secret", name: "default", want: SDSRef{Kind: SDSWorkload}, wantOK: true},
		"ROOTCA":   {reason: "istio-agent's mesh root: no Secret", name: "ROOTCA", want: SDSRef{Kind: SDSWorkload}, wantOK: true},
		"EnvoyGW":  {reason: "Envoy Gateway names SDS secrets ns/name", name: "envoy-gateway/tls-secret-foo-example-com", want: SDSRef{Kind: SDSCertificate, Namespace: "envoy-gateway", Name: "tls-secret-foo-example-com", Scheme: "envoy-gateway"}, wantOK: true},
		"FileSDS":  {reason: "a file-based SDS name refers to no Secret by name", name: "server_cert"},
		"Other":    {reason: "other schemes are not Secrets", name: "configmap://some/thing"},
		"BadNS":    {reason: "an invalid namespace is not a reference", name: "kubernetes://Bad_NS/x"},
		"BadName":  {reason: "an invalid name is not a reference", name: "a/b/c"},
		"Empty":    {reason: "nothing", name: ""},
		"TooLong":  {reason: "hostile lengths are refused", name: "kubernetes://" + string(make([]byte, 600))},
		"Builtin":  {reason: "Istio's builtin:// is the workload's own certificate, not a Secret", name: "builtin://"},
		"Sidecars": {reason: "ns/name with an uppercase letter is no Secret", name: "ns/Name"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := ParseSDSName(tc.name, "gw")
			if ok != tc.wantOK {
				t.Fatalf("%s\nParseSDSName(%q) ok = %v, want %v", tc.reason, tc.name, ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nParseSDSName(%q): -want +got:\n%s", tc.reason, tc.name, diff)
			}
		})
	}
}

// inventoryOf is a SecretLookup over "ns/name" → has a CA.
func inventoryOf(m map[string]bool) SecretLookup {
	return func(s string) (bool, bool) {
		ca, ok := m[s]
		return ok, ca
	}
}

func TestSDSBindings(t *testing.T) {
	istio := kube.EnvoyTarget{Namespace: "istio-system", Pod: "ingress-1", Preset: kube.PresetIstio}
	cert := func(n string) envoystate.Secret { return envoystate.Secret{Name: n, HasCertificate: true} }
	trust := func(n string) envoystate.Secret { return envoystate.Secret{Name: n, HasValidation: true} }
	cases := map[string]struct {
		reason    string
		target    kube.EnvoyTarget
		snap      *envoystate.Snapshot
		inv       map[string]bool
		want      []config.Binding
		wantTrust []TrustBinding
	}{
		"IstioGateway": {
			reason: "each kubernetes:// certificate binds its Secret by SDS name; workload secrets bind nothing",
			target: istio,
			snap: &envoystate.Snapshot{Secrets: []envoystate.Secret{cert("default"), trust("ROOTCA"),
				cert("kubernetes://web-cred"), cert("kubernetes://apps/api-cred"), cert("kubernetes-gateway://apps/gw-cred")}},
			want: []config.Binding{
				{Source: "istio-system/web-cred", Secret: "kubernetes://web-cred", Origin: audit.OriginSDSName},
				{Source: "apps/api-cred", Secret: "kubernetes://apps/api-cred", Origin: audit.OriginSDSName},
				{Source: "apps/gw-cred", Secret: "kubernetes-gateway://apps/gw-cred", Origin: audit.OriginSDSName},
			},
		},
		"WarmingFromListener": {
			reason: "a name the listener asks for binds even before Envoy holds the secret (it may be warming); duplicates bind once",
			target: istio,
			snap: &envoystate.Snapshot{Secrets: []envoystate.Secret{cert("kubernetes://web-cred")},
				Listeners: []envoystate.FilterChainTLS{{SDSCertNames: []string{"kubernetes://web-cred", "kubernetes://new-cred"}}}},
			want: []config.Binding{
				{Source: "istio-system/web-cred", Secret: "kubernetes://web-cred", Origin: audit.OriginSDSName},
				{Source: "istio-system/new-cred", Secret: "kubernetes://new-cred", Origin: audit.OriginSDSName},
			},
		},
		"CACertSameSecret": {
			reason: "istiod reads -cacert from the Secret without the suffix when it holds a CA",
			target: istio,
			snap: &envoystate.Snapshot{Secrets: []envoystate.Secret{cert("kubernetes://web-cred"), trust("kubernetes://web-cred-cacert")},
				Listeners: []envoystate.FilterChainTLS{{SDSValidationName: "kubernetes://web-cred-cacert"}}},
			inv:       map[string]bool{"istio-system/web-cred": true, "istio-system/web-cred-cacert": true},
			want:      []config.Binding{{Source: "istio-system/web-cred", Secret: "kubernetes://web-cred", Origin: audit.OriginSDSName}},
			wantTrust: []TrustBinding{{Secret: "kubernetes://web-cred-cacert", Source: "istio-system/web-cred"}},
		},
		"CACertSeparateSecret": {
			reason:    "without a CA in the Secret, istiod falls back to the Secret named <name>-cacert",
			target:    istio,
			snap:      &envoystate.Snapshot{Secrets: []envoystate.Secret{trust("kubernetes://apps/web-cred-cacert")}},
			inv:       map[string]bool{"apps/web-cred": false, "apps/web-cred-cacert": true},
			wantTrust: []TrustBinding{{Secret: "kubernetes://apps/web-cred-cacert", Source: "apps/web-cred-cacert"}},
		},
		"CACertOnlySuffixed": {
			reason:    "when only the -cacert Secret exists, it is the one",
			target:    istio,
			snap:      &envoystate.Snapshot{Listeners: []envoystate.FilterChainTLS{{SDSValidationName: "kubernetes://web-cred-cacert"}}},
			inv:       map[string]bool{"istio-system/web-cred-cacert": true},
			wantTrust: []TrustBinding{{Secret: "kubernetes://web-cred-cacert", Source: "istio-system/web-cred-cacert"}},
		},
		"CACertMissing": {
			reason:    "neither Secret: the trust binding says so",
			target:    istio,
			snap:      &envoystate.Snapshot{Secrets: []envoystate.Secret{trust("kubernetes://web-cred-cacert")}},
			inv:       map[string]bool{"istio-system/web-cred": false},
			wantTrust: []TrustBinding{{Secret: "kubernetes://web-cred-cacert", Source: "istio-system/web-cred", Missing: true}},
		},
		"CACertAsCertificate": {
			reason: "a -cacert name asked for as a certificate binds nothing (Istio never serves one)",
			target: istio,
			snap:   &envoystate.Snapshot{Secrets: []envoystate.Secret{cert("kubernetes://web-cred-cacert")}},
		},
		"EnvoyGatewayPreset": {
			reason: "Envoy Gateway's ns/name binds for its proxies even when the Secret is not (yet) in the inventory",
			target: kube.EnvoyTarget{Namespace: "envoy-gateway-system", Pod: "envoy-default-gw-1", Preset: kube.PresetEnvoyGateway},
			snap:   &envoystate.Snapshot{Secrets: []envoystate.Secret{cert("default/gw-tls"), cert("default/absent")}},
			inv:    map[string]bool{"default/gw-tls": true},
			want: []config.Binding{{Source: "default/gw-tls", Secret: "default/gw-tls", Origin: audit.OriginSDSName},
				{Source: "default/absent", Secret: "default/absent", Origin: audit.OriginSDSName}},
		},
		"SlashNameOtherPreset": {
			reason: "a plain Envoy's ns/name binds only a Secret the inventory holds",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p", Preset: kube.PresetEnvoy},
			snap:   &envoystate.Snapshot{Secrets: []envoystate.Secret{cert("a/web-tls"), cert("team/whatever")}},
			inv:    map[string]bool{"a/web-tls": false},
			want:   []config.Binding{{Source: "a/web-tls", Secret: "a/web-tls", Origin: audit.OriginSDSName}},
		},
		"AnnotationWins": {
			reason: "a Secret declared in certdrift.dev/secrets keeps the explicit origin",
			target: kube.EnvoyTarget{Namespace: "istio-system", Pod: "p", Preset: kube.PresetIstio, DeclaredSecrets: []string{"istio-system/web-cred"}},
			snap:   &envoystate.Snapshot{Secrets: []envoystate.Secret{cert("kubernetes://web-cred"), cert("kubernetes://other")}},
			want: []config.Binding{{Source: "istio-system/web-cred", Secret: "kubernetes://web-cred", Origin: audit.OriginConfig},
				{Source: "istio-system/other", Secret: "kubernetes://other", Origin: audit.OriginSDSName}},
		},
		"NoSnapshot": {reason: "no admin, nothing", target: istio},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, gotTrust := SDSBindings(tc.target, tc.snap, inventoryOf(tc.inv))
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nSDSBindings() bindings: -want +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantTrust, gotTrust, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nSDSBindings() trust: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestSDSBindingsRecorded feeds recorded outputs: an Istio sidecar's secrets config_dump (only
// default, ROOTCA and a configmap:// name: no Secret behind any) and Envoy Gateway's listeners
// (SNI → SDS secret "ns/name").
func TestSDSBindingsRecorded(t *testing.T) {
	t.Run("IstioSidecar", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join("testdata", "config_dump_secrets_istio_istioctl_testdata.json"))
		if err != nil {
			t.Fatalf("read fixture (copied from /work/shared/fixtures/envoy): %v", err)
		}
		secrets, listeners, err := envoyadmin.ParseConfigDump(data)
		if err != nil {
			t.Fatalf("ParseConfigDump: %v", err)
		}
		if len(secrets) < 2 {
			t.Fatalf("fixture parsed to %d secrets, want default and ROOTCA at least", len(secrets))
		}
		target := kube.EnvoyTarget{Namespace: "default", Pod: "productpage-v1", Preset: kube.PresetIstio}
		all := func(string) (bool, bool) { return true, true } // even a cluster holding every name binds nothing
		bs, trust := SDSBindings(target, &envoystate.Snapshot{Secrets: secrets, Listeners: listeners}, all)
		if len(bs) != 0 || len(trust) != 0 {
			t.Errorf("SDSBindings(istio sidecar) = %v, %v; want none (workload identity is not a Secret)", bs, trust)
		}
	})
	t.Run("EnvoyGateway", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join("testdata", "envoygateway_xds_listeners_sni_to_sds_testdata.yaml"))
		if err != nil {
			t.Fatalf("read fixture (copied from /work/shared/fixtures/envoy): %v", err)
		}
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			t.Fatalf("fixture yaml: %v", err)
		}
		var raw []json.RawMessage
		if err := json.Unmarshal(j, &raw); err != nil {
			t.Fatalf("fixture listeners: %v", err)
		}
		var fcs []envoystate.FilterChainTLS
		for _, l := range raw {
			got, err := envoyadmin.ParseListenerJSON(l)
			if err != nil {
				t.Fatalf("ParseListenerJSON: %v", err)
			}
			fcs = append(fcs, got...)
		}
		target := kube.EnvoyTarget{Namespace: "envoy-gateway-system", Pod: "envoy-gateway-1-abc", Preset: kube.PresetEnvoyGateway}
		bs, _ := SDSBindings(target, &envoystate.Snapshot{Listeners: fcs}, nil)
		want := []config.Binding{
			{Source: "envoy-gateway/tls-secret-foo-example-com", Secret: "envoy-gateway/tls-secret-foo-example-com", Origin: audit.OriginSDSName},
			{Source: "envoy-gateway/tls-secret-example-com", Secret: "envoy-gateway/tls-secret-example-com", Origin: audit.OriginSDSName},
			{Source: "envoy-gateway/tls-secret-bar-example-com", Secret: "envoy-gateway/tls-secret-bar-example-com", Origin: audit.OriginSDSName},
		}
		if diff := cmp.Diff(want, bs, cmpopts.SortSlices(func(a, b config.Binding) bool { return a.Source < b.Source })); diff != "" {
			t.Errorf("SDSBindings(envoy gateway listeners): -want +got:\n%s", diff)
		}
	})
}
