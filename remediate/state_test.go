package remediate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/certdrift/certdrift/kubeapi"
)

func TestLeaseName(t *testing.T) {
	long := strings.Repeat("a", 253)
	ns63 := strings.Repeat("n", 63)
	cases := map[string]struct {
		reason, namespace, workload, want string
	}{
		"Short": {
			reason: "readable: namespace, kind and name in order", namespace: "shop", workload: "Deployment/web",
			want: "certdrift-reload.shop.deployment.web",
		},
		"DottedName": {
			reason:    "a workload name may hold dots; namespaces and kinds cannot, so the name stays unique",
			namespace: "shop", workload: "StatefulSet/web.v2", want: "certdrift-reload.shop.statefulset.web.v2",
		},
		"Longest": {
			reason: "a 63-character namespace and a 253-character name: cut, with a hash", namespace: ns63, workload: "DaemonSet/" + long,
		},
		"CutAtADot": {
			reason:    "the cut lands after a dot: no part may end in '.' or '-' before the hash",
			namespace: "shop", workload: "Deployment/" + strings.Repeat("b", 212) + "." + strings.Repeat("c", 40),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := LeaseName(ParseWorkload(tc.namespace, tc.workload))
			if tc.want != "" && got != tc.want {
				t.Errorf("%s: LeaseName(%q, %q) = %q, want %q", tc.reason, tc.namespace, tc.workload, got, tc.want)
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("%s: %q (%d characters) is not a valid Lease name: %v", tc.reason, got, len(got), errs)
			}
			if got != LeaseName(ParseWorkload(tc.namespace, tc.workload)) {
				t.Errorf("%s: LeaseName is not stable", tc.reason)
			}
		})
	}

	// Unique per (namespace, kind, name): pairs that a joining scheme without separators (or
	// a cut without a hash) would confuse.
	pairs := [][2][2]string{
		{{"a-deployment", "Deployment/b"}, {"a", "Deployment/deployment-b"}},
		{{"shop", "Deployment/web"}, {"shop", "StatefulSet/web"}},
		{{"shop", "Deployment/web"}, {"edge", "Deployment/web"}},
		{{"shop", "Deployment/" + long + "x"}, {"shop", "Deployment/" + long + "y"}},
		{{ns63, "Deployment/" + long}, {ns63[:62] + "m", "Deployment/" + long}},
	}
	for _, p := range pairs {
		a, b := LeaseName(ParseWorkload(p[0][0], p[0][1])), LeaseName(ParseWorkload(p[1][0], p[1][1]))
		if a == b {
			t.Errorf("%s/%.20s… and %s/%.20s… share the Lease %q", p[0][0], p[0][1], p[1][0], p[1][1], a)
		}
	}
}

// TestRecordLabels: a record names its workload in labels (kubectl get -L, selectors) wherever a
// label value can hold it, and always in full in an annotation.
func TestRecordLabels(t *testing.T) {
	got := recordLabels(ParseWorkload("shop", "Deployment/web"))
	for k, v := range map[string]string{LabelWorkloadNamespace: "shop", LabelWorkloadKind: "Deployment", LabelWorkloadName: "web",
		LabelComponent: ComponentReloadRecord, "app.kubernetes.io/managed-by": "certdrift"} {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
	long := recordLabels(ParseWorkload("shop", "Deployment/"+strings.Repeat("w", 64)))
	if _, ok := long[LabelWorkloadName]; ok {
		t.Errorf("a 64-character name was put in a label: %v", long)
	}
	for k, v := range long {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s=%q is invalid: %v", k, v, errs)
		}
	}
}

// TestRecordsInLeaseNamespace: on a real API server, the records of workloads in two
// namespaces (one name 250 characters long) all land in certdrift's namespace with labels that
// select them, nothing is written in the workloads' namespaces, the hint clears a block when
// run with kubectl, and the namespace check names what is wrong: a missing namespace, a missing
// permission; with the permission granted it passes (the control).
func TestRecordsInLeaseNamespace(t *testing.T) {
	tb := controlPlane(t)
	shop, edge, leaseNS := testNamespace(t, tb), testNamespace(t, tb), testNamespace(t, tb)
	c := newClient(t, tb, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	long := "Deployment/" + strings.Repeat("w", 250)
	now := time.Now()
	failed := Record{At: now, State: StateFailed, Reason: ReasonPostCheckFailed, Since: now, Strategy: Evict, Target: shop + "/web-1"}
	for _, w := range [][2]string{{shop, "Deployment/web"}, {edge, "Deployment/web"}, {shop, long}} {
		if err := writeRecord(ctx, c, leaseNS, ParseWorkload(w[0], w[1]), failed); err != nil {
			t.Fatalf("write record of %s/%s: %v", w[0], w[1], err)
		}
		r, ok, err := ReadRecord(ctx, c, leaseNS, ParseWorkload(w[0], w[1]))
		if err != nil || !ok || r.State != StateFailed {
			t.Errorf("read record of %s/%.30s…: %+v ok %v err %v", w[0], w[1], r, ok, err)
		}
	}
	for _, ns := range []string{shop, edge} {
		l, err := c.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 0 {
			t.Errorf("Leases in the workload namespace %s: %d (%v), want none", ns, len(l.Items), err)
		}
	}
	sel := LabelComponent + "=" + ComponentReloadRecord + "," + LabelWorkloadNamespace + "=" + shop
	l, err := c.CoordinationV1().Leases(leaseNS).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range l.Items {
		names = append(names, x.Name)
		if x.Annotations[AnnWorkload] != shop+"/Deployment/web" && x.Annotations[AnnWorkload] != shop+"/"+long {
			t.Errorf("Lease %s: annotation %s = %q", x.Name, AnnWorkload, x.Annotations[AnnWorkload])
		}
	}
	if len(names) != 2 {
		t.Errorf("Leases selected by %s: %v, want the two records of %s", sel, names, shop)
	}

	// The hint, run as printed, clears the block of the long-named workload only.
	hint := ClearHint(leaseNS, ParseWorkload(shop, long))
	if out, err := tb.Kubectl(ctx, strings.Fields(strings.TrimPrefix(hint, "kubectl "))...); err != nil {
		t.Fatalf("%s: %v\n%s", hint, err, out)
	}
	if r, _, _ := ReadRecord(ctx, c, leaseNS, ParseWorkload(shop, long)); r.Blocking() {
		t.Errorf("still blocked after %s", hint)
	}
	if r, _, _ := ReadRecord(ctx, c, leaseNS, ParseWorkload(shop, "Deployment/web")); !r.Blocking() {
		t.Errorf("clearing one workload cleared %s/Deployment/web too", shop)
	}

	if err := CheckLeaseNamespace(ctx, c, leaseNS); err != nil {
		t.Errorf("check of an existing namespace as admin: %v", err)
	}
	var dry coordv1.LeaseList
	if l, err := c.CoordinationV1().Leases(leaseNS).List(ctx, metav1.ListOptions{}); err == nil {
		dry = *l
	}
	if len(dry.Items) != 3 {
		t.Errorf("%d Leases in %s after the check, want the 3 records: the check must not create one", len(dry.Items), leaseNS)
	}
	err = CheckLeaseNamespace(ctx, c, "no-such-namespace")
	if err == nil || !apierrors.IsNotFound(errors.Unwrap(err)) || !strings.Contains(err.Error(), `"no-such-namespace"`) ||
		!strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "--reload-lease-namespace") {
		t.Errorf("check of a missing namespace: %v, want NotFound naming the namespace and the flag", err)
	}
	if err := CheckLeaseNamespace(ctx, c, ""); !errors.Is(err, ErrNoLeaseNamespace) {
		t.Errorf("check without a namespace: %v", err)
	}

	user := "lease-checker-" + leaseNS
	cfg, err := tb.ClientConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := kubeapi.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = CheckLeaseNamespace(ctx, uc, leaseNS)
	if err == nil || !apierrors.IsForbidden(errors.Unwrap(err)) || !strings.Contains(err.Error(), "leases") || !strings.Contains(err.Error(), leaseNS) {
		t.Errorf("check without Lease rights: %v, want Forbidden naming leases and %s", err, leaseNS)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leases", Namespace: leaseNS},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}}}
	if _, err := tb.Client.RbacV1().Roles(leaseNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "leases", Namespace: leaseNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "leases"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	if _, err := tb.Client.RbacV1().RoleBindings(leaseNS).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		// The authorizer sees the binding through an informer, a moment after the write.
		if err = CheckLeaseNamespace(ctx, uc, leaseNS); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("check with Lease rights granted: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
