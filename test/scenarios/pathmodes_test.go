package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

// TestEnvoyPathModes runs the static-tls scenario (rotated Secret, static context: both replicas
// stale) on the package's testbed, whose Envoys run in their own mount namespaces
// (testbed.PathsMountNS, as CI runs every scenario), and on a second testbed that rewrites
// mount paths to node paths (testbed.PathsRewrite, what a run without root gets). In each mode
// it checks the paths Envoy and certdrift report — the container path /certs/tls.crt with the
// mount namespaces, the node's volume directory with rewriting, never the other — and that
// certdrift's verdicts (findings, binding states and origins) are the same in both modes.
func TestEnvoyPathModes(t *testing.T) {
	if tb.EnvoyPaths != testbed.PathsMountNS {
		t.Fatalf("the scenarios' testbed runs Envoy in path mode %q: this test compares %q with %q and needs root for the mount namespaces (run the tests as root, as CI does, without %s=%s)",
			tb.EnvoyPaths, testbed.PathsMountNS, testbed.PathsRewrite, testbed.PathModeEnv, testbed.PathsRewrite)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rewrite := testbed.StartT(t, testbed.Options{VolumeSyncDelay: syncDelay, EnvoyPaths: testbed.PathsRewrite})
	if rewrite.EnvoyPaths != testbed.PathsRewrite {
		t.Fatalf("second testbed runs in mode %q, want %q", rewrite.EnvoyPaths, testbed.PathsRewrite)
	}
	const ns = "paths-static-tls"
	ca := certs.NewCA(t)
	v1 := ca.Leaf(t, certs.WithDNSNames(webHost))
	v2 := ca.Leaf(t, certs.WithDNSNames(webHost))

	const layouts = "mount-layouts"
	old := ca.Leaf(t, certs.WithDNSNames(webHost))

	beds := []*testbed.Testbed{tb, rewrite}
	for _, bed := range beds {
		namespaces, rest := split(inNamespace(t, loadManifests(t, "static-tls"), ns))
		applyObjectsTo(ctx, t, bed, namespaces...)
		applyObjectsTo(ctx, t, bed, tlsSecret(ns, "web-tls", v1))
		applyObjectsTo(ctx, t, bed, rest...)
		namespaces, rest = split(loadManifests(t, layouts))
		applyObjectsTo(ctx, t, bed, namespaces...)
		applyObjectsTo(ctx, t, bed, tlsSecret(layouts, "web-tls", v1), tlsSecret(layouts, "old-tls", old))
		applyObjectsTo(ctx, t, bed, rest...)
	}
	t.Run("MountLayouts", func(t *testing.T) { checkMountLayouts(ctx, t, beds, v1) })
	pods := map[*testbed.Testbed][]corev1.Pod{}
	for _, bed := range beds {
		ps, err := bed.WaitPodsReady(ctx, ns, "app=envoy")
		if err != nil || len(ps) != 2 {
			t.Fatalf("%s testbed: %d pods Ready (%v), want 2", bed.EnvoyPaths, len(ps), err)
		}
		pods[bed] = ps
	}
	rotated := time.Now()
	for _, bed := range beds {
		s, err := bed.Client.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data["tls.crt"], s.Data["tls.key"] = v2.CertPEM, v2.KeyPEM
		if _, err := bed.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("rotate Secret %s/web-tls: %v", ns, err)
		}
	}
	// The rotation reached every container's /certs as that container sees it.
	for _, bed := range beds {
		for _, p := range pods[bed] {
			poll(ctx, t, fmt.Sprintf("%s pod %s seeing the rotated /certs/tls.crt", bed.EnvoyPaths, p.Name), func() error {
				got, err := bed.ReadContainerFile(ns, p.Name, "envoy", "/certs/tls.crt")
				if err != nil {
					return err
				}
				if !bytes.Equal(got, v2.CertPEM) {
					return fmt.Errorf("not yet the rotated certificate")
				}
				return nil
			})
		}
	}
	t.Logf("OBSERVED: every container sees the rotated /certs/tls.crt %s after the updates", time.Since(rotated).Round(10*time.Millisecond))
	time.Sleep(2 * time.Second) // past any watch: the static contexts stay as they are

	verdicts := map[testbed.PathMode][]string{}
	for _, bed := range beds {
		mode := bed.EnvoyPaths
		code, r := runAuditOn(t, bed, ns, "--grace", "1s")
		if code != 1 || len(r.findings("STALE_LOADED")) != 2 {
			t.Errorf("%s: audit exit %d with findings %v, want 1 with STALE_LOADED for both replicas", mode, code, r.findings())
		}
		verdicts[mode] = verdictsOf(r)
		for _, p := range pods[bed] {
			status, body, err := plainGet(hostPort(p.Status.PodIP, 9901), "/certs")
			if err != nil || status != 200 {
				t.Fatalf("%s pod %s: GET /certs: %d %v", mode, p.Name, status, err)
			}
			checkPathMode(t, bed, fmt.Sprintf("pod %s /certs", p.Name), body, `"path": "/certs/tls.crt"`)
			var files []string
			for _, b := range r.Bindings {
				if b.Envoy == ns+"/"+p.Name && b.File != "" {
					files = append(files, b.File)
				}
			}
			if len(files) == 0 {
				t.Errorf("%s pod %s: no binding with a file: %+v", mode, p.Name, r.Bindings)
			}
			checkPathMode(t, bed, fmt.Sprintf("pod %s binding files", p.Name), strings.Join(files, " "), "/certs/tls.crt")
		}
		for _, f := range r.Findings {
			if f.Code == "STALE_LOADED" {
				t.Logf("OBSERVED: %s: STALE_LOADED %s file=%s", mode, f.Subject.Envoy, f.Subject.File)
			}
		}
	}
	if diff := cmp.Diff(verdicts[testbed.PathsMountNS], verdicts[testbed.PathsRewrite]); diff != "" {
		t.Errorf("certdrift's verdicts differ between the path modes (-mountns +rewrite):\n%s", diff)
	}
}

// checkMountLayouts: the mount-layouts scenario's Envoys serve web-tls on both listeners, however
// their mounts overlap, and certdrift binds web-tls by path to both files and old-tls, which the
// container never sees, to nothing; only the two subPath mounts are findings. The mount
// namespaces must say exactly that; the rewrite mode must agree.
func checkMountLayouts(ctx context.Context, t *testing.T, beds []*testbed.Testbed, web *certs.Leaf) {
	const ns = "mount-layouts"
	verdicts := map[testbed.PathMode][]string{}
	for _, bed := range beds {
		mode := bed.EnvoyPaths
		ps, err := bed.WaitPodsReady(ctx, ns, "app=envoy")
		if err != nil || len(ps) != 2 {
			t.Fatalf("%s: %d pods Ready (%v), want 2", mode, len(ps), err)
		}
		for _, port := range []int{8443, 9443} {
			for _, p := range ps {
				if err := servesErr(tlsGet(hostPort(p.Status.PodIP, port), webHost, nil), web.Cert); err != nil {
					t.Errorf("%s pod %s port %d: %v", mode, p.Name, port, err)
				}
			}
		}
		code, r := runAuditOn(t, bed, ns)
		verdicts[mode] = verdictsOf(r)
		var want []string
		for _, p := range ps {
			want = append(want, "SUBPATH_MOUNT warning "+ns+"/"+p.Name)
		}
		slices.Sort(want)
		if diff := cmp.Diff(want, r.findings()); diff != "" || code != 1 {
			t.Errorf("%s: audit exit %d (want 1), findings (-want +got):\n%s", mode, code, diff)
		}
		for _, b := range r.Bindings {
			if b.Source == ns+"/old-tls" {
				t.Errorf("%s: old-tls bound (%s %s %s, origin %s), but every file of it the container could read is covered by web-tls", mode, b.Envoy, b.File, b.State, b.Origin)
			}
		}
		if mode != testbed.PathsMountNS {
			continue
		}
		// The audit keeps one binding per pod and source; whichever file it names must be one
		// of the two web-tls paths, bound by path (the ..data one only binds by path through
		// the kubelet layout).
		for _, p := range ps {
			n := 0
			for _, b := range r.Bindings {
				if b.Envoy != ns+"/"+p.Name || b.Source != ns+"/web-tls" {
					continue
				}
				n++
				if (b.File != "/certs/tls.crt" && b.File != "/etc/envoy/tls/..data/tls.crt") || b.Origin != "path" || b.State != "converged" {
					t.Errorf("%s pod %s: web-tls binding file %q origin %s state %s, want /certs/tls.crt or /etc/envoy/tls/..data/tls.crt, by path, converged", mode, p.Name, b.File, b.Origin, b.State)
				}
				t.Logf("OBSERVED: %s pod %s: web-tls bound to %s (%s, %s)", mode, p.Name, b.File, b.Origin, b.State)
			}
			if n == 0 {
				t.Errorf("%s pod %s: web-tls not bound", mode, p.Name)
			}
		}
	}
	if diff := cmp.Diff(verdicts[testbed.PathsMountNS], verdicts[testbed.PathsRewrite]); diff != "" {
		t.Errorf("mount-layouts: certdrift's verdicts differ between the path modes (-mountns +rewrite):\n%s", diff)
	}
}

// checkPathMode checks that what (an admin response, binding files) names the container path
// want and nothing of the node's directories with the mount namespaces, and node paths under the
// testbed's directory, not want, with rewriting.
func checkPathMode(t *testing.T, bed *testbed.Testbed, what, got, want string) {
	t.Helper()
	container, node := strings.Contains(got, want), strings.Contains(got, bed.Dir)
	switch bed.EnvoyPaths {
	case testbed.PathsMountNS:
		if !container || node || strings.Contains(got, "certdrift-testbed-") {
			t.Errorf("%s, %s mode: %s\nwant the container path %s and no node path", what, bed.EnvoyPaths, got, want)
		}
	case testbed.PathsRewrite:
		if container || !node {
			t.Errorf("%s, %s mode: %s\nwant node paths under %s, not %s", what, bed.EnvoyPaths, got, bed.Dir, want)
		}
	default:
		t.Errorf("testbed path mode %q", bed.EnvoyPaths)
	}
}

// verdictsOf is what must not depend on the path mode: each finding's code, severity and source
// and each binding's source, item, state, origin and trust, without pod names (they differ
// between testbeds), sorted.
func verdictsOf(r auditReport) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, fmt.Sprintf("finding %s %s %s", f.Code, f.Severity, f.Subject.Source))
	}
	for _, b := range r.Bindings {
		out = append(out, fmt.Sprintf("binding %s %s %s %s trust=%v", b.Source, b.Item, b.State, b.Origin, b.Trust))
	}
	slices.Sort(out)
	return out
}

// inNamespace moves a scenario's objects into namespace ns (the Namespace object renamed), so
// that the same manifests can run next to the scenario's own test.
func inNamespace(t *testing.T, objs []runtime.Object, ns string) []runtime.Object {
	t.Helper()
	for _, o := range objs {
		m, err := meta.Accessor(o)
		if err != nil {
			t.Fatalf("%s: %v", describe(o), err)
		}
		if _, ok := o.(*corev1.Namespace); ok {
			m.SetName(ns)
			continue
		}
		m.SetNamespace(ns)
	}
	return objs
}
