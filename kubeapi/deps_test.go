package kubeapi

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBinaryDoesNotLinkClientset keeps client-go's generated clientset and what pulls it in out
// of certdrift's binary. Their init functions (the clientset's scheme registers ≈56 API group
// versions, each k8s.io/api package builds swagger-doc maps) cost every certdrift process
// ≈10.7 MB of RSS before it does anything, against a 50 MB budget for a whole Kubernetes
// inventory (issue 4). Tests may import them; non-test code uses this package.
func TestBinaryDoesNotLinkClientset(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("this test lists the binary's packages with the go command, which is not in GOROOT/bin or PATH: %v", err)
		}
	}
	banned := map[string]string{
		"k8s.io/client-go/kubernetes":               "use kubeapi.NewForConfig and *kubeapi.Client",
		"k8s.io/client-go/kubernetes/scheme":        "use kubeapi.ParameterCodec (the scheme holds only the groups certdrift calls)",
		"k8s.io/client-go/informers":                "build informers on cache.ListWatch over a kubeapi resource",
		"k8s.io/client-go/tools/leaderelection":     "use remediate.Continuous (its own Lease elector, remediate/elect.go)",
		"k8s.io/client-go/tools/record":             "record Events with kubeapi's CoreV1().Events",
		"k8s.io/client-go/kubernetes/typed/core/v1": "use kubeapi's CoreV1",
	}
	pkg := "github.com/certdrift/certdrift/cmd/certdrift"
	out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps %s listed %d packages: %q", pkg, len(deps), deps)
	}
	// Every k8s.io/api package linked runs its init (scheme registration functions, swagger-doc
	// maps): a group joins this list only when a call site needs it.
	allowedAPI := map[string]bool{"k8s.io/api/core/v1": true, "k8s.io/api/apps/v1": true,
		"k8s.io/api/coordination/v1": true, "k8s.io/api/policy/v1": true}
	var extraAPI []string
	for _, d := range deps {
		if strings.HasPrefix(d, "k8s.io/api/") && !allowedAPI[d] {
			extraAPI = append(extraAPI, d)
		}
		if fix, ok := banned[d]; ok {
			t.Errorf("%s links %s: client-go's clientset registers every built-in API group at init, ≈10.7 MB of RSS in every certdrift process (issue 4); %s", pkg, d, fix)
		}
	}
	if len(extraAPI) > 0 {
		t.Errorf("%s links %d API packages beyond kubeapi's groups, e.g. %s: each costs RSS at init in every certdrift process (issue 4); if a call site needs one, add it to kubeapi and to this test's list", pkg, len(extraAPI), extraAPI[0])
	}
}
