package audit

import (
	"slices"
	"strings"
	"testing"

	"github.com/certdrift/certdrift/internal/depcheck"
)

// TestAuditDependencies keeps the judgement free of network clients (DESIGN.md's layout: audit
// imports pki and the probes' data types, never their clients). It reads Envoy's state as
// probe/envoystate values and Kubernetes facts as probe/kube values; if a change makes audit or
// audit/bind import probe/envoyadmin or a probe/kube client again, net/http or client-go come
// with them and this fails. The desired view likewise arrives as probe/desired values, whether read
// from files or summarised from Kubernetes objects, so the judgement links no reader of either
// (probe/files is the file reader). Tests may import anything.
func TestAuditDependencies(t *testing.T) {
	const reader = "github.com/certdrift/certdrift/probe/files"
	for _, pkg := range []string{"github.com/certdrift/certdrift/audit", "github.com/certdrift/certdrift/audit/bind"} {
		deps := depcheck.List(t, pkg)
		if bad := depcheck.NetworkDeps(deps); len(bad) > 0 {
			t.Errorf("%s links %s: the judgement must not link network clients; move the types it needs into a data package (as probe/envoystate is for probe/envoyadmin, probe/kube for its clients)", pkg, strings.Join(bad, ", "))
		}
		if slices.Contains(deps, reader) {
			t.Errorf("%s links %s: the judgement reads the desired view as probe/desired values, not through the file reader", pkg, reader)
		}
	}
	// Control: the reader check looks at a list that does hold the reader where it is used.
	if deps := depcheck.List(t, "github.com/certdrift/certdrift/gather"); !slices.Contains(deps, reader) {
		t.Errorf("go list -deps gather does not name %s: the check above would never fire", reader)
	}
	// Controls: the check does catch a package that links the HTTP client, and one that links
	// client-go.
	for client, want := range map[string]string{
		"github.com/certdrift/certdrift/probe/envoyadmin":     "net/http",
		"github.com/certdrift/certdrift/probe/kube/discovery": "k8s.io/client-go/rest",
	} {
		if bad := depcheck.NetworkDeps(depcheck.List(t, client)); !slices.Contains(bad, want) {
			t.Errorf("NetworkDeps(%s) = %q, want it to name %s: the check would not catch the client", client, bad, want)
		}
	}
}
