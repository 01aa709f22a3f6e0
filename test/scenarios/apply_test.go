package scenarios

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/certdrift/certdrift/test/testbed"
)

// maxManifestSize bounds one manifest file: these are small, hand-written files.
const maxManifestSize = 1 << 20

// loadManifests decodes every document of every *.yaml file in a scenario directory, files in
// name order (as `kubectl apply -f dir` reads them), with client-go's universal decoder.
func loadManifests(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("scenario %s: no *.yaml manifests (err %v)", dir, err)
	}
	sort.Strings(files)
	var objs []runtime.Object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read manifest %s: %v", f, err)
		}
		if len(data) > maxManifestSize {
			t.Fatalf("manifest %s is larger than %d bytes", f, maxManifestSize)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("split manifest %s document %d: %v", f, i, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if runtime.IsNotRegisteredError(err) {
				// A custom resource (cert-manager's Issuer, Certificate): applied unstructured.
				u := &unstructured.Unstructured{}
				if err = yaml.Unmarshal(doc, &u.Object); err == nil {
					obj = u
				}
			}
			if err != nil {
				t.Fatalf("decode manifest %s document %d: %v", f, i, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

// stripComments drops YAML comment lines, so a document of only comments counts as empty.
func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(append(out, line...), '\n')
		}
	}
	return out
}

// applyObjects creates objs in order with the typed client. A Namespace is waited on until its
// default ServiceAccount exists, because pods are refused before that.
func applyObjects(ctx context.Context, t *testing.T, objs ...runtime.Object) {
	t.Helper()
	applyObjectsTo(ctx, t, tb, objs...)
}

// applyObjectsTo is applyObjects on another testbed than the package's.
func applyObjectsTo(ctx context.Context, t *testing.T, bed *testbed.Testbed, objs ...runtime.Object) {
	t.Helper()
	c := bed.Client
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = c.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
			if err == nil {
				poll(ctx, t, "ServiceAccount "+o.Name+"/default", func() error {
					_, err := c.CoreV1().ServiceAccounts(o.Name).Get(ctx, "default", metav1.GetOptions{})
					return err
				})
			}
		case *corev1.ConfigMap:
			_, err = c.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Secret:
			_, err = c.CoreV1().Secrets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Service:
			_, err = c.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.Deployment:
			_, err = c.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *unstructured.Unstructured:
			err = createCustom(ctx, o)
		default:
			t.Fatalf("apply: unsupported object %T", obj)
		}
		if err != nil {
			t.Fatalf("apply %s: %v", describe(obj), err)
		}
	}
}

func describe(obj runtime.Object) string {
	m, ok := obj.(metav1.Object)
	if !ok {
		return fmt.Sprintf("%T", obj)
	}
	kind := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1.")
	return fmt.Sprintf("%s %s/%s", kind, m.GetNamespace(), m.GetName())
}

// split returns the Namespaces in objs and everything else, each in manifest order.
func split(objs []runtime.Object) (namespaces, rest []runtime.Object) {
	for _, o := range objs {
		if _, ok := o.(*corev1.Namespace); ok {
			namespaces = append(namespaces, o)
		} else {
			rest = append(rest, o)
		}
	}
	return namespaces, rest
}

// bringUp applies a scenario's Namespaces, then the Secrets the test minted (the manifests only
// name them), then the rest of the manifests.
func bringUp(ctx context.Context, t *testing.T, dir string, secrets ...*corev1.Secret) {
	t.Helper()
	namespaces, rest := split(loadManifests(t, dir))
	applyObjects(ctx, t, namespaces...)
	for _, s := range secrets {
		applyObjects(ctx, t, s)
	}
	applyObjects(ctx, t, rest...)
}

// waitReady waits for the pods matching selector and logs how long that took.
func waitReady(ctx context.Context, t *testing.T, ns, selector string, want int) []corev1.Pod {
	t.Helper()
	start := time.Now()
	pods, err := tb.WaitPodsReady(ctx, ns, selector)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != want {
		t.Fatalf("%d pods %q in %s Ready, want %d", len(pods), selector, ns, want)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	t.Logf("%d pods %q in %s Ready after %s", len(pods), selector, ns, time.Since(start).Round(10*time.Millisecond))
	return pods
}

// pollTimeout bounds one wait: everything a scenario waits for happens within a few sync periods.
const pollTimeout = 30 * time.Second

// poll retries fn every 100 ms until it succeeds, or fails the test with fn's last error after
// pollTimeout.
func poll(ctx context.Context, t *testing.T, what string, fn func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	var last error
	for {
		if last = fn(); last == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last: %v", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
