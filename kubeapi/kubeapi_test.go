package kubeapi_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/test/testbed"
)

var bed = testbed.Shared{Options: testbed.Options{Nodes: -1}}

func TestMain(m *testing.M) { os.Exit(bed.Main(m)) }

// controlPlane returns the package's shared testbed; without its binaries the test fails saying
// how to build them.
func controlPlane(t testing.TB) *testbed.Testbed {
	t.Helper()
	return bed.Get(t)
}

// exchange is what the recorder saw of one request.
type exchange struct {
	method, path, userAgent, accept, contentType string
}

// recorder notes every request a client makes and the content type of each answer.
type recorder struct {
	mu  sync.Mutex
	all []exchange
}

func (r *recorder) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		e := exchange{method: req.Method, path: req.URL.Path, userAgent: req.UserAgent(), accept: req.Header.Get("Accept")}
		if resp != nil {
			e.contentType = resp.Header.Get("Content-Type")
		}
		r.mu.Lock()
		r.all = append(r.all, e)
		r.mu.Unlock()
		return resp, err
	})
}

func (r *recorder) last(method, pathSuffix string) (exchange, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.all) - 1; i >= 0; i-- {
		if r.all[i].method == method && strings.HasSuffix(r.all[i].path, pathSuffix) {
			return r.all[i], true
		}
	}
	return exchange{}, false
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func newClient(t *testing.T, tb *testbed.Testbed, rec *recorder, tweak func(*rest.Config)) *kubeapi.Client {
	t.Helper()
	cfg := rest.CopyConfig(tb.Config)
	if rec != nil {
		cfg.Wrap(rec.wrap)
	}
	if tweak != nil {
		tweak(cfg)
	}
	c, err := kubeapi.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("kubeapi.NewForConfig: %v", err)
	}
	return c
}

// namespace creates a namespace starting with prefix, unique per run (-count).
func namespace(t *testing.T, tb *testbed.Testbed, prefix string) string {
	t.Helper()
	ns, err := tb.Client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s-*: %v", prefix, err)
	}
	return ns.Name
}

// TestVerbs runs every verb certdrift uses against the real API server, in each group, and
// checks the wire format and user agent of what was sent.
func TestVerbs(t *testing.T) {
	tb := controlPlane(t)
	ns := namespace(t, tb, "kubeapi-verbs")
	rec := &recorder{}
	c := newClient(t, tb, rec, func(c *rest.Config) { c.UserAgent = "kubeapi-test/1" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// core/v1 Secrets: create, get, list with a field selector, watch, update, patch, delete.
	secrets := c.CoreV1().Secrets(ns)
	w, err := secrets.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "s1").String()})
	if err != nil {
		t.Fatalf("watch secrets: %v", err)
	}
	defer w.Stop()
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s1"}, Type: "example.com/x",
		Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	select {
	case ev := <-w.ResultChan():
		s, ok := ev.Object.(*corev1.Secret)
		if ev.Type != watch.Added || !ok || s.Name != "s1" {
			t.Errorf("first watch event %s %T, want ADDED *v1.Secret s1", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event for the created Secret")
	}
	got, err := secrets.Get(ctx, "s1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get secret: %v", err)
	}
	if string(got.Data["k"]) != "v" {
		t.Errorf("secret data read back wrong")
	}
	list, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: "type=example.com/x"})
	if err != nil {
		t.Fatalf("list secrets: %v", err)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{"s1"}, names); diff != "" {
		t.Errorf("list with type field selector -want +got:\n%s", diff)
	}
	got.Labels = map[string]string{"updated": "yes"}
	if _, err := secrets.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update secret: %v", err)
	}
	got.Labels["updated"] = "stale" // same resourceVersion as before the update
	if _, err := secrets.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("update from a stale resourceVersion: err %v, want a conflict", err)
	}
	patched, err := secrets.Patch(ctx, "s1", types.MergePatchType, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`), metav1.PatchOptions{})
	if err != nil || patched.Labels["patched"] != "yes" || patched.Labels["updated"] != "yes" {
		t.Errorf("merge patch: labels %v, err %v", patched.Labels, err)
	}
	if err := secrets.Delete(ctx, "s1", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete secret: %v", err)
	}
	if _, err := secrets.Get(ctx, "s1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: err %v, want not found", err)
	}

	// The other resources, one verb each at least.
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("create configmap: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Errorf("create pod: %v", err)
	}
	if l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 1 {
		t.Errorf("list pods: %d, err %v", len(l.Items), err)
	}
	if _, err := c.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "e-"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "p"}, Reason: "Test", Type: corev1.EventTypeNormal}, metav1.CreateOptions{}); err != nil {
		t.Errorf("create event: %v", err)
	}
	one := int32(1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: appsv1.DeploymentSpec{Replicas: &one,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}}, Spec: pod.Spec}}}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	d, err := c.AppsV1().Deployments(ns).Patch(ctx, "d", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"now"}}}}}`), metav1.PatchOptions{})
	if err != nil || d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] != "now" {
		t.Errorf("patch deployment template: err %v", err)
	}
	for name, get := range map[string]func() error{
		"daemonset":   func() error { _, err := c.AppsV1().DaemonSets(ns).Get(ctx, "none", metav1.GetOptions{}); return err },
		"statefulset": func() error { _, err := c.AppsV1().StatefulSets(ns).Get(ctx, "none", metav1.GetOptions{}); return err },
		"replicaset":  func() error { _, err := c.AppsV1().ReplicaSets(ns).Get(ctx, "none", metav1.GetOptions{}); return err },
	} {
		if err := get(); !apierrors.IsNotFound(err) {
			t.Errorf("get missing %s: err %v, want not found (the resource path is wrong otherwise)", name, err)
		}
	}
	holder := "me"
	if _, err := c.CoordinationV1().Leases(ns).Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"},
		Spec: coordv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("create lease: %v", err)
	}
	if l, err := c.CoordinationV1().Leases(ns).Get(ctx, "l", metav1.GetOptions{}); err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "me" {
		t.Errorf("get lease: %v, err %v", l, err)
	}

	// Built-in types travel as protobuf, as client-go's generated clients ask for them; the
	// configured user agent is kept.
	for _, q := range []struct{ method, path string }{
		{"GET", "/api/v1/namespaces/" + ns + "/secrets/s1"},
		{"GET", "/api/v1/namespaces/" + ns + "/secrets"},
		{"POST", "/apis/apps/v1/namespaces/" + ns + "/deployments"},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases/l"},
	} {
		e, ok := rec.last(q.method, q.path)
		if !ok {
			t.Errorf("no %s %s recorded", q.method, q.path)
			continue
		}
		if !strings.HasPrefix(e.accept, "application/vnd.kubernetes.protobuf") || e.contentType != "application/vnd.kubernetes.protobuf" {
			t.Errorf("%s %s: Accept %q, answer %q: want protobuf", q.method, q.path, e.accept, e.contentType)
		}
		if e.userAgent != "kubeapi-test/1" {
			t.Errorf("%s %s: User-Agent %q, want the configured kubeapi-test/1", q.method, q.path, e.userAgent)
		}
	}
}

// TestRateLimitIsShared checks that QPS bounds the whole client, not each group: three
// requests to three groups with QPS 4 and burst 1 take at least half a second.
func TestRateLimitIsShared(t *testing.T) {
	tb := controlPlane(t)
	c := newClient(t, tb, nil, func(c *rest.Config) { c.QPS, c.Burst = 4, 1 })
	ctx := context.Background()
	start := time.Now()
	_, err1 := c.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{Limit: 1})
	_, err2 := c.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{Limit: 1})
	_, err3 := c.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{Limit: 1})
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 450*time.Millisecond {
		t.Errorf("three requests at QPS 4, burst 1 took %s: each group has its own limiter", took)
	}
}

func TestNewForConfigErrors(t *testing.T) {
	cases := map[string]struct {
		reason string
		cfg    *rest.Config
		want   string
	}{
		"NoConfig":     {reason: "nil config", cfg: nil, want: "no client configuration"},
		"QPSNoBurst":   {reason: "QPS without burst", cfg: &rest.Config{Host: "https://127.0.0.1:1", QPS: 5}, want: "burst must be above 0"},
		"BadTLSFile":   {reason: "unreadable CA file", cfg: &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{CAFile: "/nonexistent/ca.crt"}}, want: "127.0.0.1:1"},
		"UnparsedHost": {reason: "host that is no URL", cfg: &rest.Config{Host: "http://[::1"}, want: "[::1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := kubeapi.NewForConfig(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err %v, want one naming %q", tc.reason, err, tc.want)
			}
		})
	}
}

func TestNewForConfigLeavesConfigAlone(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1", QPS: 5, Burst: 10}
	before := rest.CopyConfig(cfg)
	if _, err := kubeapi.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.RateLimiter != nil || cfg.UserAgent != before.UserAgent || cfg.GroupVersion != nil || cfg.NegotiatedSerializer != nil {
		t.Errorf("NewForConfig changed the caller's config: %+v", cfg)
	}
}
