package testbed

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// TestControlPlane starts the real control plane and checks the behaviour the later node agent
// and certdrift's Kubernetes mode build on: versions, authentication and RBAC, and the
// Deployment → ReplicaSet → Pod, disruption and namespace controllers. It runs without nodes
// (Nodes: -1), so pods stay Pending and unbound: the controllers alone are under test here.
func TestControlPlane(t *testing.T) {
	tb := StartT(t, Options{Nodes: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("ServerVersion", func(t *testing.T) {
		v, err := tb.Client.Discovery().ServerVersion()
		if err != nil {
			t.Fatalf("GET /version: %v", err)
		}
		if diff := cmp.Diff(KubeVersion, v.GitVersion); diff != "" {
			t.Errorf("/version gitVersion (-want +got):\n%s", diff)
		}
	})

	t.Run("KubectlUsesKubeconfig", func(t *testing.T) {
		out, err := tb.Kubectl(ctx, "get", "namespace", "kube-system", "-o", "name")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if diff := cmp.Diff("namespace/kube-system", strings.TrimSpace(string(out))); diff != "" {
			t.Errorf("kubectl output (-want +got):\n%s", diff)
		}
	})

	t.Run("RBACDeniesUnboundUser", func(t *testing.T) {
		cfg, err := tb.ClientConfig("someone-without-bindings")
		if err != nil {
			t.Fatal(err)
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("listing kube-system Secrets without bindings: got %v, want Forbidden", err)
		}
	})

	t.Run("DeploymentCreatesPendingPods", func(t *testing.T) {
		testDeployment(ctx, t, tb)
	})
}

func testDeployment(ctx context.Context, t *testing.T, tb *Testbed) {
	c := tb.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "testbed-deploy"}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	labels := map[string]string{"app": "envoy"}
	replicas := int32(2)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "envoy", Namespace: ns.Name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "envoy", Image: "envoyproxy/envoy:v1.40.0",
				}}},
			},
		},
	}
	deploy, err := c.AppsV1().Deployments(ns.Name).Create(ctx, deploy, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "envoy", Namespace: ns.Name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &intstr.IntOrString{Type: intstr.Int, IntVal: 1},
			Selector:     &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns.Name).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PodDisruptionBudget: %v", err)
	}

	// The deployment controller creates one ReplicaSet owned by the Deployment...
	var rs appsv1.ReplicaSet
	poll(ctx, t, "a ReplicaSet owned by the Deployment", func() error {
		list, err := c.AppsV1().ReplicaSets(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		owned := slices.DeleteFunc(list.Items, func(r appsv1.ReplicaSet) bool { return !ownedBy(r.OwnerReferences, deploy.UID) })
		if len(owned) != 1 {
			return fmt.Errorf("%d ReplicaSets owned by the Deployment", len(owned))
		}
		rs = owned[0]
		return nil
	})
	// ...whose controller creates the pods, admitted with a service-account token volume.
	poll(ctx, t, "2 Pending pods owned by the ReplicaSet", func() error {
		list, err := c.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var got []string
		for _, p := range list.Items {
			if !ownedBy(p.OwnerReferences, rs.UID) {
				continue
			}
			got = append(got, fmt.Sprintf("phase=%s node=%q token=%v", p.Status.Phase, p.Spec.NodeName, hasTokenVolume(p)))
		}
		want := []string{`phase=Pending node="" token=true`, `phase=Pending node="" token=true`}
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("pods (-want +got):\n%s", diff)
		}
		return nil
	})
	// The disruption controller has counted them against the budget; none is healthy, so none
	// may be disrupted.
	poll(ctx, t, "PodDisruptionBudget status from the disruption controller", func() error {
		got, err := c.PolicyV1().PodDisruptionBudgets(ns.Name).Get(ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s := got.Status
		want := "expected=2 healthy=0 desired=1 allowed=0"
		if g := fmt.Sprintf("expected=%d healthy=%d desired=%d allowed=%d", s.ExpectedPods, s.CurrentHealthy, s.DesiredHealthy, s.DisruptionsAllowed); g != want || s.ObservedGeneration < 1 {
			return fmt.Errorf("status %s (observedGeneration %d), want %s", g, s.ObservedGeneration, want)
		}
		return nil
	})

	// Deleting the namespace runs the namespace controller and the garbage collector to the end.
	if err := c.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace: %v", err)
	}
	poll(ctx, t, "namespace deleted", func() error {
		_, err := c.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("namespace still present (err %v)", err)
	})
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

func hasTokenVolume(p corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil {
			return true
		}
	}
	return false
}

// poll retries check until it succeeds or ctx ends, then fails t with the last error.
func poll(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	start := time.Now()
	var last error
	for {
		if last = check(); last == nil {
			t.Logf("%s after %s", what, time.Since(start).Round(time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last: %v", what, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
