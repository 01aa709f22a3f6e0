// Package depcheck lists what a package links, for the tests that keep the judgement and the
// data packages it reads free of network clients (DESIGN.md's layout).
package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// banned are the network clients: the HTTP stack, client-go and apimachinery, and certdrift's
// own packages that hold clients. probe/kube itself is the client-free facts package; its
// sub-packages are the clients.
var banned = []string{"net/http", "k8s.io/client-go", "k8s.io/apimachinery",
	"github.com/certdrift/certdrift/probe/envoyadmin", "github.com/certdrift/certdrift/probe/kube/",
	"github.com/certdrift/certdrift/kubeapi", "github.com/certdrift/certdrift/remediate"}

// NetworkDeps returns the packages of deps that are network clients.
func NetworkDeps(deps []string) []string {
	var bad []string
	for _, d := range deps {
		for _, b := range banned {
			if d == b || strings.HasPrefix(d, strings.TrimSuffix(b, "/")+"/") {
				bad = append(bad, d)
				break
			}
		}
	}
	return bad
}

// List returns `go list -deps pkg`: what pkg's non-test build links.
func List(t testing.TB, pkg string) []string {
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
