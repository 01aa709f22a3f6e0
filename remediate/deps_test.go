package remediate

import (
	"strings"
	"testing"

	"github.com/certdrift/certdrift/internal/depcheck"
)

// TestRemediateDependencies keeps repair beside the exposition, not above it (docs/architecture.md):
// it reaches the Kubernetes session through Observer and AdminOpener, and exposes what it did
// through Recorder and RemediatorConfig.SetBlocked, so it imports neither gather, the probes'
// clients, collector nor exporter. Data packages are allowed: audit's types, and through them
// probe/kube itself (client-free Kubernetes facts, e.g. cert-manager's Certificates), but none of
// probe/kube's client subpackages. Tests may import anything.
func TestRemediateDependencies(t *testing.T) {
	const mod = "github.com/certdrift/certdrift/"
	banned := []string{mod + "gather", mod + "collector", mod + "exporter", mod + "probe/kube/", mod + "probe/envoyadmin"}
	check := func(deps []string) []string {
		var bad []string
		for _, d := range deps {
			for _, b := range banned {
				if strings.HasPrefix(d, b) { // "probe/kube/": its client subpackages, not the root
					bad = append(bad, d)
				}
			}
		}
		return bad
	}
	if bad := check(depcheck.List(t, mod+"remediate")); len(bad) > 0 {
		t.Errorf("remediate links %s: take the session through Observer/AdminOpener and the metrics through Recorder instead", strings.Join(bad, ", "))
	}
	// Control: the check catches a package that does link them.
	if bad := check(depcheck.List(t, mod+"exporter")); len(bad) == 0 {
		t.Error("the check finds nothing banned in exporter, which imports gather and collector: it would not catch remediate doing so")
	}
}
