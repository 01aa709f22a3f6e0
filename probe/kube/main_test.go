package kube

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/test/testbed"
)

// One control plane serves every test of the package (each test uses its own namespaces); it
// starts on first use, so the parser tests run without it.
var bed = testbed.Shared{Options: testbed.Options{}}

func TestMain(m *testing.M) { os.Exit(bed.Main(m)) }

// controlPlane returns the package's shared testbed; without its binaries the test fails saying
// how to build them.
func controlPlane(t testing.TB) *testbed.Testbed {
	t.Helper()
	return bed.Get(t)
}

// fastAdmin is an admin client allowed to create thousands of objects quickly.
func fastAdmin(t testing.TB, tb *testbed.Testbed) kubernetes.Interface {
	t.Helper()
	c := rest.CopyConfig(tb.Config)
	c.QPS, c.Burst = 2000, 2000
	c.ContentType = "application/vnd.kubernetes.protobuf"
	// The API server warns about the deliberately broken TLS Secrets the tests create.
	c.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	return cs
}

func createNamespaces(t testing.TB, c kubernetes.Interface, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", n, err)
		}
	}
}

func tlsSecret(ns, name string, cert, key, ca []byte) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": cert, "tls.key": key}}
	if ca != nil {
		s.Data["ca.crt"] = ca
	}
	return s
}

func createSecret(t testing.TB, c kubernetes.Interface, s *corev1.Secret) *corev1.Secret {
	t.Helper()
	out, err := c.CoreV1().Secrets(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{FieldManager: "certdrift-test"})
	if err != nil {
		t.Fatalf("create secret %s/%s: %v", s.Namespace, s.Name, err)
	}
	return out
}

// grantSecretsReader gives user a Role in ns to list and watch Secrets and ConfigMaps.
func grantSecretsReader(t testing.TB, c kubernetes.Interface, ns, user string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "certdrift-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"list", "watch"}}}}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role in %s: %v", ns, err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "certdrift-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "certdrift-reader"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role binding in %s: %v", ns, err)
	}
}

// startInventory builds and runs an inventory, stopping it when the test ends.
func startInventory(t testing.TB, cfg *rest.Config, opts Options) *Inventory {
	t.Helper()
	inv, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := inv.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("inventory did not stop within 10s of cancel")
		}
	})
	return inv
}

func waitSynced(t testing.TB, inv *Inventory) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := inv.WaitSynced(ctx); err != nil {
		t.Fatalf("WaitSynced: %v", err)
	}
}

// request is one API request as the client sent it, with the response's content type.
type request struct {
	method, path, query, contentType string
}

// recorder is a transport wrapper that records every request through a client configuration.
type recorder struct {
	mu   sync.Mutex
	reqs []request
	next http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.reqs = append(r.reqs, request{req.Method, req.URL.Path, req.URL.RawQuery, resp.Header.Get("Content-Type")})
		r.mu.Unlock()
	}
	return resp, err
}

func (r *recorder) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.reqs...)
}

// recorded returns a copy of cfg whose requests rec records.
func recorded(cfg *rest.Config, rec *recorder) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec })
	return c
}

var nsCounter atomic.Int64

// uniqueNS returns a namespace name unique to this process (tests may run with -count).
func uniqueNS(t testing.TB, suffix string) string {
	n := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(n) > 36 {
		n = n[:36]
	}
	return fmt.Sprintf("%s-%d-%s", strings.Trim(n, "-"), nsCounter.Add(1), suffix)
}
