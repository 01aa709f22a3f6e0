package desired

import (
	"slices"
	"strings"
	"testing"

	"github.com/certdrift/certdrift/internal/depcheck"
)

// allowed are the only certdrift packages the desired view's types may link: the audit, the
// collector and both producers (probe/files, probe/kube) import this package, so anything it links
// they all link.
var allowed = []string{
	"github.com/certdrift/certdrift/pki",
	"github.com/certdrift/certdrift/ref",
	"github.com/certdrift/certdrift/probe/desired",
}

// ownDeps are the certdrift packages in deps that are not allowed.
func ownDeps(deps []string) []string {
	var bad []string
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/certdrift/certdrift/") && !slices.Contains(allowed, d) {
			bad = append(bad, d)
		}
	}
	return bad
}

// TestDesiredDependencies keeps the package plain data: no network client, no file reader, no
// certdrift package beyond pki and ref.
func TestDesiredDependencies(t *testing.T) {
	deps := depcheck.List(t, "github.com/certdrift/certdrift/probe/desired")
	if bad := depcheck.NetworkDeps(deps); len(bad) > 0 {
		t.Errorf("probe/desired links network clients %s", strings.Join(bad, ", "))
	}
	if bad := ownDeps(deps); len(bad) > 0 {
		t.Errorf("probe/desired links %s; it may link only pki and ref of certdrift's packages", strings.Join(bad, ", "))
	}
	// Control: the file reader links more than pki and ref (its bounded file reads), and the check
	// names it.
	if bad := ownDeps(depcheck.List(t, "github.com/certdrift/certdrift/probe/files")); !slices.Contains(bad, "github.com/certdrift/certdrift/internal/boundedfile") {
		t.Errorf("ownDeps(probe/files) = %q, want it to name internal/boundedfile: the check would not catch a reader", bad)
	}
}
