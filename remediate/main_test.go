package remediate

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/test/testbed"
)

// One control plane serves the package's Kubernetes tests (each in its own namespace); it
// starts on first use, so the other tests run without it.
var bed = testbed.Shared{Options: testbed.Options{Nodes: -1}}

func TestMain(m *testing.M) { os.Exit(bed.Main(m)) }

// controlPlane returns the package's shared testbed; without its binaries the test fails saying
// how to build them.
func controlPlane(t testing.TB) *testbed.Testbed {
	t.Helper()
	return bed.Get(t)
}

// testNamespace creates a namespace named after the test, unique per run (-count).
func testNamespace(t testing.TB, tb *testbed.Testbed) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns, err := tb.Client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s-*: %v", name, err)
	}
	return ns.Name
}

// partition is a switch between one client and the API server: while cut, every request fails
// at once as if the network were down, the way a replica loses the API server.
type partition struct{ cut atomic.Bool }

var errPartitioned = errors.New("test partition: API server unreachable")

type partitionRT struct {
	p    *partition
	next http.RoundTripper
}

func (r partitionRT) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.p.cut.Load() {
		return nil, errPartitioned
	}
	return r.next.RoundTrip(req)
}

// newClient is a kubeapi client of the testbed's admin that goes through p (nil: no switch).
func newClient(t testing.TB, tb *testbed.Testbed, p *partition) *kubeapi.Client {
	t.Helper()
	cfg := rest.CopyConfig(tb.Config)
	if p != nil {
		prev := cfg.WrapTransport
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			if prev != nil {
				rt = prev(rt)
			}
			return partitionRT{p: p, next: rt}
		}
	}
	c, err := kubeapi.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("kubeapi client: %v", err)
	}
	return c
}
