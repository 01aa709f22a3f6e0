package deploy

// Real requests as certdrift's ServiceAccount (a token from the TokenRequest API, the
// credentials the pod has), after `kubectl auth can-i` has said what RBAC allows: port-forward,
// Leases and workload patches, each refused or admitted by the API server itself, with the
// restart-only ValidatingAdmissionPolicy of the repair profile enforcing what RBAC cannot.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/test/testbed"
)

// grants is what a profile should let the ServiceAccount do, for realRequests.
type grants struct {
	portForward []string // namespaces where port-forward is allowed
	repair      []string // namespaces where the restart patch is allowed
	policy      bool     // the restart-only admission policy is installed
	leases      bool     // Leases in certdrift's namespace
}

// profileGrants are the kustomize overlays' and the chart's value sets' grants, by name.
var profileGrants = map[string]grants{
	"cluster-readonly":        {},
	"namespaced":              {},
	"port-forward":            {portForward: []string{"edge"}},
	"namespaced-port-forward": {portForward: []string{"shop", "edge"}},
	"repair":                  {repair: []string{"shop", "edge", "other"}, policy: true, leases: true},
	"namespaced-repair":       {repair: []string{"shop", "edge"}, policy: true, leases: true},
	"repair-scoped":           {repair: []string{"shop"}, policy: true, leases: true},
}

const restartOnlyMessage = "certdrift may only restart"

// requestNamespaces are where realRequests looks; the tests create them.
var requestNamespaces = []string{"shop", "edge", "other"}

// saClient is a client holding a fresh token of certdrift's ServiceAccount.
func saClient(ctx context.Context, t *testing.T, tb *testbed.Testbed) *kubernetes.Clientset {
	t.Helper()
	ttl := int64(600)
	tok, err := tb.Client.CoreV1().ServiceAccounts(releaseNS).CreateToken(ctx, release,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for ServiceAccount %s/%s: %v", releaseNS, release, err)
	}
	c, err := kubernetes.NewForConfig(&rest.Config{Host: tb.Config.Host, BearerToken: tok.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: tb.CAPEM()}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// requestObjects creates, once, a bare pod and a Deployment "web" in each request namespace
// and a StatefulSet "db" in shop (no node: they stay Pending, which is enough for the API).
func requestObjects(ctx context.Context, t *testing.T, tb *testbed.Testbed) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels,
		Annotations: map[string]string{"team": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0"}}}}
	two := int32(2)
	for _, ns := range requestNamespaces {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "envoy", Namespace: ns}, Spec: tmpl.Spec}
		if _, err := tb.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}
		if _, err := tb.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
		Spec: appsv1.StatefulSetSpec{Replicas: &two, ServiceName: "db", Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}
	if _, err := tb.Client.AppsV1().StatefulSets("shop").Create(ctx, sts, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// restartPatch is the patch certdrift's rollout-restart sends (remediate/kube.go).
func restartPatch(at time.Time) []byte {
	return fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, at.UTC().Format(time.RFC3339))
}

// realRequests sends the requests as certdrift's ServiceAccount and checks each against g.
func realRequests(ctx context.Context, t *testing.T, tb *testbed.Testbed, profile string) {
	t.Helper()
	g, ok := profileGrants[profile]
	if !ok {
		t.Fatalf("no grants declared for profile %s", profile)
	}
	requestObjects(ctx, t, tb)
	sa := saClient(ctx, t, tb)

	t.Run("PortForward", func(t *testing.T) {
		for _, ns := range append(slices.Clone(requestNamespaces), "kube-system") {
			want := slices.Contains(g.portForward, ns)
			// Authorization comes before the handler: a refused request is 403 whatever the
			// pod; an allowed one gets past it (and fails later: no upgrade, no running pod).
			// RBAC changes reach the authorizer a moment after the write: poll towards want.
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; {
				err = sa.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name("envoy").SubResource("portforward").Do(ctx).Error()
				if apierrors.IsForbidden(err) != want || time.Now().After(deadline) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			switch {
			case want && apierrors.IsForbidden(err):
				t.Errorf("%s: port-forward in %s refused: %v", profile, ns, err)
			case !want && !apierrors.IsForbidden(err):
				t.Errorf("%s: port-forward in %s not refused by RBAC: %v", profile, ns, err)
			case !want && !strings.Contains(err.Error(), `cannot create resource "pods/portforward"`):
				t.Errorf("%s: port-forward refusal does not name pods/portforward: %v", profile, err)
			}
		}
	})

	t.Run("Leases", func(t *testing.T) {
		for _, ns := range []string{releaseNS, "kube-system", "kube-node-lease", "shop"} {
			want := g.leases && ns == releaseNS
			l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "certdrift-request-test", Namespace: ns}}
			_, err := sa.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case want && err != nil:
				t.Errorf("%s: create a Lease in %s: %v", profile, ns, err)
			case !want && !apierrors.IsForbidden(err):
				t.Errorf("%s: create a Lease in %s: %v, want forbidden", profile, ns, err)
			}
		}
		// An existing Lease of the control plane: not even readable, let alone writable.
		if _, err := sa.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s: get kube-system's kube-controller-manager Lease: %v, want forbidden", profile, err)
		}
	})

	t.Run("Patch", func(t *testing.T) {
		deployments := func(ns string) func(types.PatchType, []byte) error {
			return func(pt types.PatchType, b []byte) error {
				_, err := sa.AppsV1().Deployments(ns).Patch(ctx, "web", pt, b, metav1.PatchOptions{FieldManager: "certdrift"})
				return err
			}
		}
		if g.policy {
			waitPolicy(ctx, t, deployments(g.repair[0]))
		}
		for _, ns := range requestNamespaces {
			err := deployments(ns)(types.StrategicMergePatchType, restartPatch(time.Now()))
			switch {
			case slices.Contains(g.repair, ns) && err != nil:
				t.Errorf("%s: the restart patch of Deployment %s/web refused: %v", profile, ns, err)
			case !slices.Contains(g.repair, ns) && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot patch resource "deployments"`)):
				t.Errorf("%s: the restart patch of Deployment %s/web: %v, want refused by RBAC", profile, ns, err)
			}
		}
		if len(g.repair) == 0 {
			return
		}
		ns := g.repair[0]
		refused := map[string]string{
			"Image":              `{"spec":{"template":{"spec":{"containers":[{"name":"envoy","image":"evil.example/envoy:latest"}]}}}}`,
			"Replicas":           `{"spec":{"replicas":5}}`,
			"Strategy":           `{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null}}}`,
			"Paused":             `{"spec":{"paused":true}}`,
			"TemplateLabel":      `{"spec":{"template":{"metadata":{"labels":{"extra":"x"}}}}}`,
			"TemplateAnnotation": `{"spec":{"template":{"metadata":{"annotations":{"team":"other"}}}}}`,
			"NewAnnotation":      `{"spec":{"template":{"metadata":{"annotations":{"sidecar.istio.io/inject":"false"}}}}}`,
			"DropAnnotation":     `{"spec":{"template":{"metadata":{"annotations":{"team":null}}}}}`,
			"Label":              `{"metadata":{"labels":{"extra":"x"}}}`,
			"Annotation":         `{"metadata":{"annotations":{"extra":"x"}}}`,
			"RestartAndImage": `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2030-01-01T00:00:00Z"}},` +
				`"spec":{"containers":[{"name":"envoy","image":"evil.example/envoy:latest"}]}}}}`,
		}
		if !g.policy {
			return
		}
		before, err := tb.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for name, p := range refused {
			err := deployments(ns)(types.StrategicMergePatchType, []byte(p))
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), restartOnlyMessage) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
				t.Errorf("%s: patch %s of Deployment %s/web: %v, want refused by the restart-only policy", profile, name, err, ns)
			} else if name == "Image" {
				t.Logf("OBSERVED %s: %v", profile, err)
			}
		}
		after, err := tb.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.Generation != before.Generation {
			t.Errorf("%s: Deployment %s/web went from generation %d to %d through refused patches", profile, ns, before.Generation, after.Generation)
		}
		// Another kind, another patch type: the restart of a StatefulSet by JSON merge patch
		// passes, its image change does not.
		if slices.Contains(g.repair, "shop") {
			sts := func(b string) error {
				_, err := sa.AppsV1().StatefulSets("shop").Patch(ctx, "db", types.MergePatchType, []byte(b), metav1.PatchOptions{})
				return err
			}
			if err := sts(string(restartPatch(time.Now().Add(time.Hour)))); err != nil {
				t.Errorf("%s: restart of StatefulSet shop/db: %v", profile, err)
			}
			if err := sts(`{"spec":{"replicas":7}}`); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), restartOnlyMessage) {
				t.Errorf("%s: replicas of StatefulSet shop/db: %v, want refused by the policy", profile, err)
			}
		}
		// The control: the policy is about certdrift only; the admin still changes replicas.
		if _, err := tb.Client.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType,
			[]byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("%s: the admin's replicas patch refused: %v", profile, err)
		}
	})
}

// waitPolicy waits until the restart-only policy refuses certdrift's patches: policies reach
// admission through an informer, a moment after they are written. The probe (a label change)
// lands if the policy is not active yet; the checks after it do not depend on the label.
func waitPolicy(ctx context.Context, t *testing.T, patch func(types.PatchType, []byte) error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		err := patch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"certdrift-probe":"p%d"}}}`, i))
		if err != nil && strings.Contains(err.Error(), restartOnlyMessage) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restart-only policy never refused a label change by certdrift (last: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
