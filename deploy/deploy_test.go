package deploy

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/certdrift/certdrift/test/testbed"
)

const sa = "system:serviceaccount:certdrift:certdrift"

var profiles = []string{"cluster-readonly", "namespaced", "port-forward", "repair"}

// kubectl is the testbed's kubectl: kustomize is built into it, so no other tool is needed.
func kubectl(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(testbed.BinDirEnv)
	if dir == "" {
		dir = filepath.Join("..", ".cache", "kube", testbed.KubeVersion)
	}
	p := filepath.Join(dir, "kubectl")
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("kubectl not found at %s: build the testbed binaries with `make kube` (scripts/build-kube.sh), or set %s", p, testbed.BinDirEnv)
	}
	return p
}

// run runs a command with a deadline: a cold CGO_ENABLED=0 -trimpath build of certdrift (with
// client-go) takes many minutes on a small shared machine, later runs hit the build cache.
func run(t *testing.T, dir, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// render runs `kubectl kustomize` on an overlay and decodes its objects.
func render(t *testing.T, profile string) ([]byte, []*unstructured.Unstructured) {
	t.Helper()
	out, err := run(t, ".", kubectl(t), "kustomize", filepath.Join("kustomize", "overlays", profile))
	if err != nil {
		t.Fatalf("render %s: %v", profile, err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("render %s: decode: %v", profile, err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return out, objs
}

func find(objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == ns && o.GetName() == name {
			return o
		}
	}
	return nil
}

func convert[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &v); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return &v
}

func ids(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName()))
	}
	slices.Sort(out)
	return out
}

// TestRender checks what each overlay renders to, before any API server sees it.
func TestRender(t *testing.T) {
	common := []string{
		"Deployment certdrift/certdrift", "Namespace /certdrift", "NetworkPolicy certdrift/certdrift",
		"Service certdrift/certdrift", "ServiceAccount certdrift/certdrift",
	}
	base := []string{"serve", "--in-cluster", "--web.listen-address=:9809", "--log.format=json"}
	direct := append(slices.Clone(base), "--admin-access=direct")
	clusterRO := []string{"ClusterRole /certdrift-readonly", "ClusterRoleBinding /certdrift-readonly"}
	cases := map[string]struct {
		objects []string
		args    []string
	}{
		"cluster-readonly": {objects: slices.Concat(common, clusterRO), args: direct},
		"namespaced": {
			objects: append(slices.Clone(common), "Role edge/certdrift-readonly", "Role shop/certdrift-readonly",
				"RoleBinding edge/certdrift-readonly", "RoleBinding shop/certdrift-readonly"),
			args: append(slices.Clone(direct), "--namespace=shop,edge"),
		},
		"port-forward": {
			objects: slices.Concat(common, clusterRO, []string{"Role edge/certdrift-portforward", "RoleBinding edge/certdrift-portforward"}),
			args:    append(slices.Clone(base), "--admin-access=auto"),
		},
		"repair": {
			objects: slices.Concat(common, clusterRO, []string{"ClusterRole /certdrift-repair", "ClusterRoleBinding /certdrift-repair",
				"Role certdrift/certdrift-leases", "RoleBinding certdrift/certdrift-leases",
				"ValidatingAdmissionPolicy /certdrift-repair-restart-only", "ValidatingAdmissionPolicyBinding /certdrift-repair-restart-only"}),
			args: direct,
		},
	}
	for _, profile := range profiles {
		tc := cases[profile]
		t.Run(profile, func(t *testing.T) {
			_, objs := render(t, profile)
			want := slices.Clone(tc.objects)
			slices.Sort(want)
			if diff := cmp.Diff(want, ids(objs)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			d := find(objs, "Deployment", "certdrift", "certdrift")
			if d == nil {
				t.Fatal("no Deployment")
			}
			dep := convert[appsv1.Deployment](t, d)
			c := dep.Spec.Template.Spec.Containers[0]
			if diff := cmp.Diff(tc.args, c.Args); diff != "" {
				t.Errorf("container args (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(c.Image, "ghcr.io/certdrift/certdrift:") {
				t.Errorf("image %q: the images transformer did not apply", c.Image)
			}
			if dep.Spec.Template.Spec.ServiceAccountName != "certdrift" {
				t.Errorf("serviceAccountName %q", dep.Spec.Template.Spec.ServiceAccountName)
			}
			// Read-only means read-only: in every profile, certdrift-readonly grants only reads,
			// and no subresource (pods/portforward, pods/exec) at all.
			for _, o := range objs {
				if (o.GetKind() != "ClusterRole" && o.GetKind() != "Role") || o.GetName() != "certdrift-readonly" {
					continue
				}
				r := convert[rbacv1.ClusterRole](t, o)
				for _, rule := range r.Rules {
					for _, verb := range rule.Verbs {
						if !slices.Contains([]string{"get", "list", "watch"}, verb) {
							t.Errorf("%s %s/%s grants %s on %v", o.GetKind(), o.GetNamespace(), o.GetName(), verb, rule.Resources)
						}
					}
					for _, res := range rule.Resources {
						if strings.Contains(res, "/") {
							t.Errorf("%s %s/%s grants the subresource %s", o.GetKind(), o.GetNamespace(), o.GetName(), res)
						}
					}
				}
			}
		})
	}
}

// TestOnAPIServer applies every overlay to a real kube-apiserver: first with --dry-run=server,
// then for real, one profile at a time, asking `kubectl auth can-i` as certdrift's
// ServiceAccount what it may do.
func TestOnAPIServer(t *testing.T) {
	rendered := map[string][]byte{}
	objects := map[string][]*unstructured.Unstructured{}
	for _, p := range profiles {
		rendered[p], objects[p] = render(t, p)
	}
	tb := testbed.StartT(t, testbed.Options{Nodes: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	k := func(args ...string) ([]byte, error) { return tb.Kubectl(ctx, args...) }
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, ns := range []string{"shop", "edge", "other"} {
		if out, err := k("create", "namespace", ns); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// The Namespace must exist for a server-side dry run of the objects in it, and the
	// ServiceAccount for admission of the pod that uses it.
	for i, o := range []*unstructured.Unstructured{
		find(objects["cluster-readonly"], "Namespace", "", "certdrift"),
		find(objects["cluster-readonly"], "ServiceAccount", "certdrift", "certdrift"),
	} {
		b, _ := json.Marshal(o.Object)
		if out, err := k("apply", "-f", write(fmt.Sprintf("setup-%d.json", i), b)); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}

	for _, p := range profiles {
		t.Run("DryRun/"+p, func(t *testing.T) {
			out, err := k("apply", "--dry-run=server", "-f", write(p+".yaml", rendered[p]))
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if n := strings.Count(string(out), "(server dry run)"); n != len(objects[p]) {
				t.Errorf("%d objects accepted in the dry run, want %d:\n%s", n, len(objects[p]), out)
			}
		})
	}

	t.Run("PodSecurityRestricted", func(t *testing.T) {
		dep := convert[appsv1.Deployment](t, find(objects["cluster-readonly"], "Deployment", "certdrift", "certdrift"))
		pod := corev1.Pod{
			TypeMeta:   metav1TypeMeta("v1", "Pod"),
			ObjectMeta: dep.Spec.Template.ObjectMeta,
			Spec:       dep.Spec.Template.Spec,
		}
		pod.Name, pod.Namespace = "certdrift-psa", "certdrift"
		b, _ := json.Marshal(pod)
		if out, err := k("create", "--dry-run=server", "-f", write("pod.json", b)); err != nil {
			t.Fatalf("the Deployment's pod is not admitted under the restricted level: %v\n%q", err, out)
		}
		// The control: the same pod, allowed to escalate, must be refused, or the check above
		// proves nothing about enforcement.
		yes := true
		pod.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes
		b, _ = json.Marshal(pod)
		out, err := k("create", "--dry-run=server", "-f", write("pod-bad.json", b))
		if err == nil || !strings.Contains(string(out), "violates PodSecurity") {
			t.Fatalf("a pod allowing privilege escalation was not refused by Pod Security admission (err %v):\n%s", err, out)
		}
	})

	type can struct {
		verb, resource, ns string
		want               bool
	}
	// What no profile but its own opt-in may do: port-forward (write access to every pod) and
	// Leases outside certdrift's namespace (kube-system's leader elections, node heartbeats).
	never := []can{
		{"create", "leases.coordination.k8s.io", "kube-system", false},
		{"update", "leases.coordination.k8s.io", "kube-system", false},
		{"create", "leases.coordination.k8s.io", "kube-node-lease", false},
		{"update", "leases.coordination.k8s.io", "kube-node-lease", false},
		{"create", "leases.coordination.k8s.io", "shop", false},
		{"create", "pods/exec", "shop", false},
		{"delete", "pods", "shop", false},
		{"update", "secrets", "shop", false},
	}
	cases := map[string][]can{
		"cluster-readonly": append([]can{
			{"list", "secrets", "shop", true},
			{"watch", "configmaps", "other", true},
			{"get", "pods", "edge", true},
			{"get", "replicasets.apps", "shop", true},
			{"list", "secrets", "*", true},
			{"create", "pods/portforward", "shop", false},
			{"create", "pods/portforward", "edge", false},
			{"create", "pods/eviction", "shop", false},
			{"patch", "deployments.apps", "shop", false},
			{"create", "events", "shop", false},
			{"create", "leases.coordination.k8s.io", "certdrift", false},
		}, never...),
		"namespaced": append([]can{
			{"list", "secrets", "shop", true},
			{"watch", "pods", "edge", true},
			{"create", "pods/portforward", "edge", false},
			{"list", "secrets", "other", false},
			{"list", "secrets", "*", false},
			{"create", "pods/eviction", "shop", false},
		}, never...),
		"port-forward": append([]can{
			{"list", "secrets", "*", true},
			{"create", "pods/portforward", "edge", true},
			{"create", "pods/portforward", "shop", false},
			{"create", "pods/portforward", "kube-system", false},
			{"create", "pods/eviction", "edge", false},
		}, never...),
		"repair": append([]can{
			{"list", "secrets", "shop", true},
			{"create", "pods/eviction", "shop", true},
			{"patch", "deployments.apps", "shop", true},
			{"patch", "daemonsets.apps", "other", true},
			{"patch", "statefulsets.apps", "edge", true},
			{"create", "events", "shop", true},
			{"create", "events.events.k8s.io", "shop", true},
			{"get", "leases.coordination.k8s.io", "certdrift", true},
			{"create", "leases.coordination.k8s.io", "certdrift", true},
			{"update", "leases.coordination.k8s.io", "certdrift", true},
			{"create", "pods/portforward", "shop", false},
			{"update", "deployments.apps", "shop", false},
			{"patch", "deployments.apps/scale", "shop", false},
			{"create", "pods", "shop", false},
		}, never...),
	}
	for _, p := range profiles {
		t.Run("CanI/"+p, func(t *testing.T) {
			file := write(p+".yaml", rendered[p])
			if out, err := k("apply", "-f", file); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, c := range cases[p] {
				got, out := canI(ctx, t, k, c.verb, c.resource, c.ns, c.want)
				if got != c.want {
					t.Errorf("%s: can-i %s %s -n %s = %v, want %v (%s)", p, c.verb, c.resource, c.ns, got, c.want, out)
				}
			}
			realRequests(ctx, t, tb, p)
			// Remove this profile's RBAC before the next one, keeping the namespace.
			var rbac []byte
			for _, o := range objects[p] {
				if strings.HasSuffix(o.GetKind(), "Role") || strings.HasSuffix(o.GetKind(), "RoleBinding") {
					b, _ := json.Marshal(o.Object)
					rbac = append(append(rbac, b...), '\n')
				}
			}
			if out, err := k("delete", "--wait", "-f", write(p+"-rbac.json", rbac)); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// canI asks the API server, polling briefly towards want: RBAC changes reach the authorizer
// through an informer, a few milliseconds after the write.
func canI(ctx context.Context, t *testing.T, k func(...string) ([]byte, error), verb, resource, ns string, want bool) (bool, string) {
	t.Helper()
	args := []string{"auth", "can-i", verb}
	res, sub, _ := strings.Cut(resource, "/")
	args = append(args, res)
	if sub != "" {
		args = append(args, "--subresource="+sub)
	}
	if ns == "*" {
		args = append(args, "--all-namespaces")
	} else {
		args = append(args, "-n", ns)
	}
	args = append(args, "--as="+sa)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := k(args...)
		answer := strings.TrimSpace(string(out))
		var got bool
		switch {
		case err == nil && answer == "yes":
			got = true
		case answer == "no" || strings.HasPrefix(answer, "no\n") || strings.HasPrefix(answer, "no -"):
			got = false
		default:
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if got == want || time.Now().After(deadline) {
			return got, answer
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var buildLine = regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .*)$`)

// TestDockerfile checks the image's properties and runs its build line: the binary it builds
// must be static (no interpreter, no shared libraries) and carry the version it was given.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	stages := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage build, found FROM lines %v", stages)
	}
	if final := stages[len(stages)-1][1]; final != "scratch" && !strings.HasPrefix(final, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s: want scratch or distroless static", final)
	}
	users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if len(users) == 0 || users[len(users)-1][1] != "65532:65532" {
		t.Errorf("USER lines %v: want the last to be 65532:65532", users)
	}
	m := buildLine.FindStringSubmatch(df)
	if m == nil {
		t.Fatal("no `RUN CGO_ENABLED=0 go build ...` line")
	}
	out := filepath.Join(t.TempDir(), "certdrift")
	line := strings.NewReplacer("${VERSION}", "v0.0.0-test", "${REVISION}", "r-test", "${CREATED}", "2026-01-02T03:04:05Z", "/out/certdrift", out).Replace(m[1])
	if _, err := run(t, "..", "sh", "-c", "nice -n 10 env "+line); err != nil {
		t.Fatalf("the Dockerfile's build line fails: %v", err)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: it is dynamically linked and will not run FROM scratch")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	v, err := run(t, ".", out, "version")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(v), "v0.0.0-test") || !strings.Contains(string(v), "r-test") || !strings.Contains(string(v), "2026-01-02T03:04:05Z") {
		t.Errorf("certdrift version = %q: the -X flags did not set the version, commit and date", v)
	}
}

func metav1TypeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}
