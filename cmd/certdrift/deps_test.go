package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryDependencies keeps out of certdrift's binary the libraries that cost every certdrift
// process memory before it does anything: a linked package's init functions fault in pages of
// the binary around them, so what is linked shows up in RSS whether it is used or not. Issue 4's
// budget is 50 MB for a whole 10,000-Secret inventory; see docs/benchmarks.md for the
// measurements behind each reason. Tests may import these packages freely.
func TestBinaryDependencies(t *testing.T) {
	// go test puts the go command that runs it first on PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test lists the binary's packages with the go command, which is not on PATH: %v", err)
	}
	const clientset = "client-go's clientset registers every built-in API group at init, ≈10.7 MB of RSS"
	const controlPlane = "go-control-plane's generated protobuf packages cost ≈5 MB of RSS; decode admin JSON with the structs of probe/envoyadmin/wire.go"
	banned := []struct{ prefix, why string }{
		{"k8s.io/client-go/kubernetes", clientset + "; use kubeapi.NewForConfig and *kubeapi.Client (and kubeapi.ParameterCodec for the scheme)"},
		{"k8s.io/client-go/informers", clientset + "; build informers on cache.ListWatch over a kubeapi resource"},
		{"k8s.io/client-go/tools/leaderelection", clientset + "; use remediate.Continuous (its own Lease elector, remediate/elect.go)"},
		{"k8s.io/client-go/tools/record", clientset + "; record Events with kubeapi's CoreV1().Events"},
		{"k8s.io/client-go/gentype", "it holds the clientset's fakes, which link client-go/testing, field management, strategic merge patch and kube-openapi: ≈3 MB of the binary and ≈3.6 MB of RSS in every process; use kubeapi.Resource"},
		{"k8s.io/client-go/testing", "fakes only; see k8s.io/client-go/gentype"},
		{"github.com/envoyproxy/go-control-plane", controlPlane},
		{"github.com/cncf/xds", controlPlane},
		{"google.golang.org/protobuf/encoding/protojson", controlPlane},
	}
	// Every k8s.io/api package linked runs its init (scheme registration, swagger-doc maps): a
	// group joins this list only when a call site needs it, through kubeapi.
	allowedAPI := map[string]bool{"k8s.io/api/core/v1": true, "k8s.io/api/apps/v1": true,
		"k8s.io/api/coordination/v1": true, "k8s.io/api/policy/v1": true}

	const pkg = "github.com/certdrift/certdrift/cmd/certdrift"
	out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps %s listed %d packages: %q", pkg, len(deps), deps)
	}
	var extraAPI []string
	for _, d := range deps {
		if strings.HasPrefix(d, "k8s.io/api/") && !allowedAPI[d] {
			extraAPI = append(extraAPI, d)
		}
		for _, b := range banned {
			if d == b.prefix || strings.HasPrefix(d, b.prefix+"/") {
				t.Errorf("%s links %s: %s", pkg, d, b.why)
			}
		}
	}
	if len(extraAPI) > 0 {
		t.Errorf("%s links %d API packages beyond kubeapi's groups, e.g. %s: each costs RSS at init in every certdrift process; if a call site needs one, add it to kubeapi and to this test's list", pkg, len(extraAPI), extraAPI[0])
	}
}
