package inventory

import (
	"context"
	"os"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
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
	kubetest.RunUntilCleanup(t, "inventory", inv.Run)
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
