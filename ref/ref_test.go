package ref

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestSourceStringParse: String writes exactly the names certdrift has always printed, and
// ParseKube reads them back; shapes that name no Kubernetes object are refused.
func TestSourceStringParse(t *testing.T) {
	cases := map[string]struct {
		reason string
		text   string
		src    Source
		ok     bool
		key    string
	}{
		"Secret":          {reason: "a Secret is namespace/name", text: "a/web-tls", src: Source{Secret, "a", "web-tls"}, ok: true, key: "a/web-tls"},
		"ConfigMap":       {reason: "a ConfigMap carries the configmap: prefix", text: "configmap:a/bundle", src: Source{ConfigMap, "a", "bundle"}, ok: true, key: "a/bundle"},
		"NoNamespace":     {reason: "a bare name is no Kubernetes source", text: "web-tls"},
		"EmptyNamespace":  {reason: "the namespace may not be empty", text: "/web-tls"},
		"EmptyName":       {reason: "the name may not be empty", text: "a/"},
		"SlashInName":     {reason: "a name holds no slash", text: "a/b/c"},
		"PrefixOnly":      {reason: "the prefix alone names nothing", text: "configmap:"},
		"ConfigMapNoName": {reason: "a ConfigMap needs namespace and name", text: "configmap:bundle"},
		"Empty":           {reason: "nothing", text: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := ParseKube(tc.text)
			if ok != tc.ok || got != tc.src {
				t.Fatalf("%s: ParseKube(%q) = %#v, %v; want %#v, %v", tc.reason, tc.text, got, ok, tc.src, tc.ok)
			}
			if !ok {
				return
			}
			if s := got.String(); s != tc.text {
				t.Errorf("%s: String() = %q, want the text it was parsed from, %q", tc.reason, s, tc.text)
			}
			if k := got.Key(); k != tc.key || SourceKey(tc.text) != tc.key {
				t.Errorf("%s: Key() = %q, SourceKey(%q) = %q; want %q", tc.reason, k, tc.text, SourceKey(tc.text), tc.key)
			}
		})
	}
	if got := (Source{Kind: File, Name: "web"}).String(); got != "web" {
		t.Errorf("a local source's String() = %q, want its configured name", got)
	}
}

func TestSourceValid(t *testing.T) {
	cases := map[string]struct {
		src  Source
		want bool
	}{
		"Secret":          {Source{Secret, "a", "web-tls"}, true},
		"ConfigMap":       {Source{ConfigMap, "a", "kube-root-ca.crt"}, true},
		"UpperCase":       {Source{Secret, "a", "Web_TLS"}, false},
		"BadNamespace":    {Source{Secret, "a.b", "web"}, false},
		"NoKind":          {Source{"", "a", "web"}, false},
		"File":            {Source{File, "", "web"}, true},
		"FileWithoutName": {Source{File, "", ""}, false},
	}
	for name, tc := range cases {
		if got := tc.src.Valid(); got != tc.want {
			t.Errorf("%s: %#v.Valid() = %v, want %v", name, tc.src, got, tc.want)
		}
	}
}

func TestEnvoyAndWorkload(t *testing.T) {
	e, ok := ParseEnvoy("istio-system/ingress-7d9")
	if !ok || e != (Envoy{"istio-system", "ingress-7d9"}) || e.String() != "istio-system/ingress-7d9" {
		t.Errorf("ParseEnvoy = %#v, %v; String %q", e, ok, e.String())
	}
	for _, bad := range []string{"", "pod", "/pod", "ns/", "ns/a/b"} {
		if _, ok := ParseEnvoy(bad); ok {
			t.Errorf("ParseEnvoy(%q) accepted it", bad)
		}
	}
	w, ok := ParseWorkload("web", "Deployment/frontend")
	if !ok || w != (Workload{"web", "Deployment", "frontend"}) || w.String() != "Deployment/frontend" {
		t.Errorf("ParseWorkload = %#v, %v; String %q", w, ok, w.String())
	}
	for _, bad := range []string{"", "Deployment", "/x", "Deployment/", "Deployment/a/b"} {
		if _, ok := ParseWorkload("ns", bad); ok {
			t.Errorf("ParseWorkload(%q) accepted it", bad)
		}
	}
	if got := (Workload{Namespace: "ns"}).String(); got != "" {
		t.Errorf("a bare pod's workload String() = %q, want empty", got)
	}
}

// TestDNSNamesMatchAPIMachinery: the package's DNS name checks agree with the API server's
// (apimachinery's validation, which this package must not link) on names around every rule.
func TestDNSNamesMatchAPIMachinery(t *testing.T) {
	names := []string{"", "a", "a-b", "-a", "a-", "A", "a_b", "a.b", "a..b", ".a", "a.", "a.-b", "0", "0a", "a/b",
		"web-tls", "istio-ca-root-cert", "kube-root-ca.crt", "a b", "é",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 253), strings.Repeat("a", 254),
		strings.Repeat("a", 62) + "-", strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 127) + "a"}
	for _, s := range names {
		if got, want := IsDNSLabel(s), len(validation.IsDNS1123Label(s)) == 0; got != want {
			t.Errorf("IsDNSLabel(%q) = %v, apimachinery says %v", s, got, want)
		}
		if got, want := IsDNSSubdomain(s), len(validation.IsDNS1123Subdomain(s)) == 0; got != want {
			t.Errorf("IsDNSSubdomain(%q) = %v, apimachinery says %v", s, got, want)
		}
	}
}
