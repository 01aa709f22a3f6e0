package kube

import (
	"strings"
	"testing"

	"github.com/certdrift/certdrift/internal/depcheck"
)

// TestFactsDependencies keeps this package free of Kubernetes and HTTP clients, so that the
// judgement can import it (audit's TestAuditDependencies checks audit and audit/bind too).
func TestFactsDependencies(t *testing.T) {
	const self = "github.com/certdrift/certdrift/probe/kube"
	if bad := depcheck.NetworkDeps(depcheck.List(t, self)); len(bad) > 0 {
		t.Errorf("%s links %s: the facts package must not link network clients", self, strings.Join(bad, ", "))
	}
}
