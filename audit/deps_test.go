package audit

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestAuditDependencies keeps the judgement free of network clients (DESIGN.md's layout: audit
// imports pki and the probes' data types, never their clients). It reads Envoy's state as
// probe/envoystate values; if a change makes audit import probe/envoyadmin or probe/kube again,
// net/http or client-go come with them and this fails. Tests may import anything.
func TestAuditDependencies(t *testing.T) {
	const self = "github.com/certdrift/certdrift/audit"
	if bad := networkDeps(listDeps(t, self)); len(bad) > 0 {
		t.Errorf("%s links %s: the judgement must not link network clients; move the types it needs into a data package (as probe/envoystate is for probe/envoyadmin)", self, strings.Join(bad, ", "))
	}
	// Control: the check does catch a package that links the HTTP client.
	const client = "github.com/certdrift/certdrift/probe/envoyadmin"
	if bad := networkDeps(listDeps(t, client)); !slices.Contains(bad, "net/http") {
		t.Errorf("networkDeps(%s) = %q, want it to name net/http: the check would not catch the HTTP client", client, bad)
	}
}

// networkDeps returns the packages of deps that are network clients: the HTTP stack, client-go,
// and certdrift's own probes that hold clients.
func networkDeps(deps []string) []string {
	banned := []string{"net/http", "k8s.io/client-go", "k8s.io/apimachinery",
		"github.com/certdrift/certdrift/probe/envoyadmin", "github.com/certdrift/certdrift/probe/kube",
		"github.com/certdrift/certdrift/kubeapi", "github.com/certdrift/certdrift/remediate"}
	var bad []string
	for _, d := range deps {
		for _, b := range banned {
			if d == b || strings.HasPrefix(d, b+"/") {
				bad = append(bad, d)
				break
			}
		}
	}
	return bad
}

// listDeps returns `go list -deps pkg`: what pkg's non-test build links.
func listDeps(t *testing.T, pkg string) []string {
	t.Helper()
	// go test puts the go command that runs it first on PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test lists the package's dependencies with the go command, which is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps %s listed %d packages: %q", pkg, len(deps), deps)
	}
	return deps
}
