package kube

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/certdrift/certdrift/internal/depcheck"
)

// TestValidRefMatchesAPIMachinery: the package's own DNS name checks agree with the API server's
// (apimachinery's validation, which this package must not link) on names around every rule.
func TestValidRefMatchesAPIMachinery(t *testing.T) {
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

// TestFactsDependencies keeps this package free of Kubernetes and HTTP clients, so that the
// judgement can import it (audit's TestAuditDependencies checks audit and audit/bind too).
func TestFactsDependencies(t *testing.T) {
	const self = "github.com/certdrift/certdrift/probe/kube"
	if bad := depcheck.NetworkDeps(depcheck.List(t, self)); len(bad) > 0 {
		t.Errorf("%s links %s: the facts package must not link network clients", self, strings.Join(bad, ", "))
	}
}
