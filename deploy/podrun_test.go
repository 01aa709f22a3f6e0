package deploy

// TestPodRun installs the chart into the testbed and lets the node agent run the certdrift pod
// itself (the testbed runs certdrift images as the certdrift binary, with the pod's own
// ServiceAccount token at the in-cluster path: test/testbed/README.md), to show that each RBAC
// profile is enough for its mode and that the read-only profile cannot evict.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

const (
	staticNS   = "static-tls"
	staticHost = "web.static-tls.test"
)

// buildCertdrift builds ./cmd/certdrift into a temporary directory.
func buildCertdrift(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "certdrift")
	if out, err := run(t, "..", "go", "build", "-o", bin, "./cmd/certdrift"); err != nil {
		t.Fatalf("build certdrift: %v\n%s", err, out)
	}
	return bin
}

func TestPodRun(t *testing.T) {
	helmBin(t)
	bin := buildCertdrift(t)
	tb := testbed.StartT(t, testbed.Options{CertdriftBinary: bin})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k := func(args ...string) ([]byte, error) { return tb.Kubectl(ctx, args...) }
	dir := t.TempDir()

	// The static-tls scenario: two Envoys that never reload, then a rotation, so both go stale.
	ca := certs.NewCA(t)
	v1, v2 := ca.Leaf(t, certs.WithDNSNames(staticHost)), ca.Leaf(t, certs.WithDNSNames(staticHost))
	if out, err := k("apply", "-f", "../test/scenarios/static-tls/00-namespace.yaml"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web-tls", Namespace: staticNS},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": v1.CertPEM, "tls.key": v1.KeyPEM}}
	if _, err := tb.Client.CoreV1().Secrets(staticNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret web-tls: %v", err)
	}
	if out, err := k("apply", "-f", "../test/scenarios/static-tls/"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, ns := range []string{"other"} {
		if out, err := k("create", "namespace", ns); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	envoys := waitPods(ctx, t, tb, staticNS, "app=envoy", 2)
	secret.Data = map[string][]byte{"tls.crt": v2.CertPEM, "tls.key": v2.KeyPEM}
	if _, err := tb.Client.CoreV1().Secrets(staticNS).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("rotate Secret web-tls: %v", err)
	}
	for _, p := range envoys {
		pollT(ctx, t, "the rotated tls.crt in "+p.Name+"'s volume", func() error {
			d, err := tb.PodDir(staticNS, p.Name)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(filepath.Join(d, "volumes", "tls", "tls.crt"))
			if err != nil || !bytes.Equal(b, v2.CertPEM) {
				return fmt.Errorf("not yet (err %v)", err)
			}
			return nil
		})
	}
	var wantStale []string
	for _, p := range envoys {
		wantStale = append(wantStale, "STALE_LOADED "+p.Name, "STALE_SERVED "+p.Name)
	}
	slices.Sort(wantStale)

	nsYAML := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: certdrift\n  labels:\n" +
		"    pod-security.kubernetes.io/enforce: restricted\n    pod-security.kubernetes.io/enforce-version: latest\n"
	nsFile := filepath.Join(dir, "ns.yaml")
	if err := os.WriteFile(nsFile, []byte(nsYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := k("apply", "-f", nsFile); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	common := []string{"image.repository=certdrift", "image.tag=test", "log.format=text",
		"extraArgs={--interval=1s,--grace=1s}"}
	var installArgs func(t *testing.T, verb string, valueArgs ...string) corev1.Pod
	install := func(t *testing.T, verb string, set ...string) corev1.Pod {
		t.Helper()
		return installArgs(t, verb, setArgs(set)...)
	}
	installArgs = func(t *testing.T, verb string, valueArgs ...string) corev1.Pod {
		t.Helper()
		args := append(append([]string{verb, release, chartDir, "--namespace", releaseNS, "--kubeconfig", tb.KubeconfigPath,
			"--wait", "--timeout", "90s"}, setArgs(common)...), valueArgs...)
		start := time.Now()
		if out, err := helm(t, args...); err != nil {
			state, _ := k("get", "deployments,replicasets,pods,events", "--namespace", releaseNS, "-o", "wide")
			t.Fatalf("%v\n%s\n%s\n--- %s:\n%s", err, out, podLogs(ctx, tb), releaseNS, state)
		}
		pods := waitPods(ctx, t, tb, releaseNS, "app.kubernetes.io/name=certdrift,app.kubernetes.io/component=exporter", 1)
		t.Logf("OBSERVED: helm %s %v: certdrift pod %s Ready %s after the start of helm", verb, valueArgs, pods[0].Name, time.Since(start).Round(100*time.Millisecond))
		return pods[0]
	}
	uninstall := func(t *testing.T) {
		t.Helper()
		if out, err := helm(t, "uninstall", release, "--namespace", releaseNS, "--kubeconfig", tb.KubeconfigPath, "--wait", "--timeout", "90s"); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
		// helm waits for the Deployment; its ReplicaSets and pods go by garbage collection.
		// The next install reuses the names, so start it only when they are gone.
		pollT(ctx, t, "the release's ReplicaSets and pods gone", func() error {
			out, err := k("get", "replicasets,pods", "--namespace", releaseNS, "-l", "app.kubernetes.io/name=certdrift", "-o", "name")
			if err != nil || strings.TrimSpace(string(out)) != "" {
				return fmt.Errorf("still there: %s (%v)", strings.TrimSpace(string(out)), err)
			}
			return nil
		})
	}
	t.Run("ClusterReadonly", func(t *testing.T) {
		pod := install(t, "install")
		defer uninstall(t)
		got := pollFindings(ctx, t, tb, pod.Name, wantStale)
		t.Logf("OBSERVED: cluster-readonly pod %s exports %v", pod.Name, got)
		checkNoForbidden(t, tb, pod.Name)

		// The same ServiceAccount token cannot repair: RBAC refuses it with 403, at the repair
		// guard's read of the workload (it counts Ready replicas before any action) or at the
		// eviction itself.
		code, rep, out := auditAs(ctx, t, tb, bin, dir, "readonly")
		results := reloadOutcomes(rep)
		t.Logf("OBSERVED: read-only audit --reload --yes: exit %d, results %v", code, results)
		if len(results) == 0 || !slices.ContainsFunc(results, func(r outcome) bool {
			return (r.Outcome == "failed" || r.Outcome == "skipped") && strings.Contains(strings.ToLower(r.Detail), "forbidden")
		}) {
			t.Errorf("read-only profile: want the repair refused as forbidden (403); exit %d, results %v\n%s", code, results, out)
		}
		for _, r := range results {
			if r.Outcome == "done" {
				t.Errorf("read-only profile evicted %s", r.Target)
			}
		}
		// The repair asked for did not happen: exit 3, not the 1 of "findings, nothing tried".
		if code != 3 {
			t.Errorf("read-only audit --reload --yes: exit %d, want 3 (every action refused or not checkable)", code)
		}
		for _, p := range envoys {
			if _, err := tb.Client.CoreV1().Pods(staticNS).Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("pod %s is gone after a read-only audit: %v", p.Name, err)
			}
		}

		// Without rbac.portForward, an audit that needs a port-forward (forced here: these
		// admins listen on the pod IP) gets 403 and says so: every Envoy UNREACHABLE with the
		// missing permission named, exit 1, promptly; never a hang or a clean report.
		start := time.Now()
		code, stdout, all := certdriftAs(ctx, t, tb, bin, dir, "readonly-pf", "--admin-access=port-forward")
		var pf struct {
			Findings []struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Subject struct {
					Envoy string `json:"envoy"`
				} `json:"subject"`
			} `json:"findings"`
		}
		if err := json.Unmarshal(stdout, &pf); err != nil {
			t.Fatalf("audit --admin-access=port-forward: exit %d, not JSON: %v\n%s", code, err, all)
		}
		unreachable := map[string]string{}
		for _, f := range pf.Findings {
			if f.Code == "UNREACHABLE" && strings.Contains(f.Message, "pods/portforward") && strings.Contains(f.Message, "forbidden") {
				unreachable[f.Subject.Envoy] = f.Message
			}
		}
		t.Logf("OBSERVED: read-only audit --admin-access=port-forward: exit %d after %s, %d Envoys UNREACHABLE naming pods/portforward, e.g. %.300q",
			code, time.Since(start).Round(100*time.Millisecond), len(unreachable), unreachable[staticNS+"/"+envoys[0].Name])
		if code != 1 || len(unreachable) != len(envoys) {
			t.Errorf("without port-forward RBAC: exit %d, UNREACHABLE naming pods/portforward for %v; want exit 1 and all %d Envoys\n%s",
				code, unreachable, len(envoys), all)
		}
	})

	t.Run("Namespaced", func(t *testing.T) {
		pod := install(t, "install", "rbac.profile=namespaced", "rbac.namespaces={"+staticNS+"}")
		defer uninstall(t)
		got := pollFindings(ctx, t, tb, pod.Name, wantStale)
		t.Logf("OBSERVED: namespaced pod %s exports %v", pod.Name, got)
		checkNoForbidden(t, tb, pod.Name)
		// The control: the namespaced ServiceAccount really cannot read elsewhere.
		if out, err := k("auth", "can-i", "list", "secrets", "-n", "other", "--as", sa); err == nil || !strings.Contains(string(out), "no") {
			t.Errorf("namespaced profile may list Secrets in other: %s (%v)", out, err)
		}

		// repair.enabled on the same profile, with the restart-only admission policy the chart
		// installs: certdrift's own rollout-restart (the patch the policy admits) goes through,
		// and its record is a Lease in certdrift's namespace, none in the workload's.
		install(t, "upgrade", "rbac.profile=namespaced", "rbac.namespaces={"+staticNS+"}", "repair.enabled=true")
		if _, err := tb.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, release+"-repair-restart-only", metav1.GetOptions{}); err != nil {
			t.Fatalf("the chart with repair.enabled installed no restart-only policy: %v", err)
		}
		code, rep, out := auditAs(ctx, t, tb, bin, dir, "repair", "--reload-strategy", "rollout-restart")
		results := reloadOutcomes(rep)
		t.Logf("OBSERVED: repair audit --reload --yes --reload-strategy rollout-restart: exit %d, results %v", code, results)
		done := 0
		for _, r := range results {
			if r.Outcome == "done" {
				done++
			}
		}
		if done == 0 {
			t.Errorf("repair profile: no rollout-restart done; exit %d, results %v\n%s", code, results, out)
		}
		lease := "certdrift-reload." + staticNS + ".deployment.envoy"
		l, err := tb.Client.CoordinationV1().Leases(releaseNS).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			t.Errorf("reload record Lease %s/%s: %v", releaseNS, lease, err)
		} else {
			t.Logf("OBSERVED: Lease %s/%s labels %v, last-outcome %q", releaseNS, lease, l.Labels, l.Annotations["certdrift.dev/last-outcome"])
			if l.Annotations["certdrift.dev/last-outcome"] != "done" || l.Labels["certdrift.dev/workload-namespace"] != staticNS {
				t.Errorf("Lease %s/%s: annotations %v, labels %v: want last-outcome done, workload-namespace %s", releaseNS, lease, l.Annotations, l.Labels, staticNS)
			}
		}
		if ls, err := tb.Client.CoordinationV1().Leases(staticNS).List(ctx, metav1.ListOptions{}); err != nil || len(ls.Items) != 0 {
			t.Errorf("Leases in the workload namespace %s: %v (%v), want none", staticNS, ls, err)
		}
	})

	// The tuning values (testdata/values/runtime-tuned.yaml, one replica here): the process gets
	// GOMEMLIMIT and GOGC as the Go runtime reports them, the PodDisruptionBudget selects the
	// pod, and `helm test` passes against the running release and fails against a closed port.
	t.Run("Tuned", func(t *testing.T) {
		pod := installArgs(t, "install", "-f", filepath.Join("testdata", "values", "runtime-tuned.yaml"), "--set", "replicas=1")
		defer uninstall(t)
		// A failed test pod stays (hook-delete-policy); it must go before the uninstall's wait.
		defer func() {
			if out, err := k("delete", "pod", "certdrift-healthcheck", "--namespace", releaseNS, "--ignore-not-found", "--wait"); err != nil {
				t.Errorf("%v\n%s", err, out)
			}
		}()
		// The findings changed with the repair above; what counts here is an audited cluster.
		pollT(ctx, t, "the tuned pod's kubernetes source up", func() error {
			expo, err := scrape(ctx, tb, pod.Name)
			if err != nil {
				return err
			}
			if _, up := staleFindings(expo); !up {
				return errors.New("certdrift_source_up{source=\"kubernetes\"} is not 1")
			}
			return nil
		})
		checkNoForbidden(t, tb, pod.Name)

		var wantLimit string
		for _, e := range pod.Spec.Containers[0].Env {
			if e.Name == "GOMEMLIMIT" {
				wantLimit = e.Value
			}
		}
		if wantLimit == "" {
			t.Fatal("the pod has no GOMEMLIMIT")
		}
		expo, err := scrape(ctx, tb, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		for metric, want := range map[string]string{"go_gc_gomemlimit_bytes": wantLimit, "go_gc_gogc_percent": "150"} {
			v, ok := sampleValue(expo, metric)
			w, _ := strconv.ParseFloat(want, 64)
			if !ok || v != w {
				t.Errorf("%s = %v (present %v), want %s from the pod's env", metric, v, ok, want)
			}
			t.Logf("OBSERVED: %s %v", metric, v)
		}

		pollT(ctx, t, "the PodDisruptionBudget counting the certdrift pod", func() error {
			pdb, err := tb.Client.PolicyV1().PodDisruptionBudgets(releaseNS).Get(ctx, release, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pdb.Status.ExpectedPods != 1 || pdb.Status.CurrentHealthy != 1 {
				return fmt.Errorf("expected %d healthy %d", pdb.Status.ExpectedPods, pdb.Status.CurrentHealthy)
			}
			return nil
		})
		if _, err := tb.Client.NetworkingV1().NetworkPolicies(releaseNS).Get(ctx, release, metav1.GetOptions{}); err != nil {
			t.Errorf("NetworkPolicy: %v", err)
		}

		// The testbed has no Service routing or cluster DNS (test/testbed/README.md), so the test
		// pod is pointed at the certdrift pod's IP; in a cluster the default is the Service.
		helmTest := func(addr string) ([]byte, error) {
			if out, err := helm(t, "upgrade", release, chartDir, "--namespace", releaseNS, "--kubeconfig", tb.KubeconfigPath,
				"--reuse-values", "--set", "tests.address="+addr, "--wait", "--timeout", "90s"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			return helm(t, "test", release, "--namespace", releaseNS, "--kubeconfig", tb.KubeconfigPath, "--timeout", "90s")
		}
		if out, err := helmTest(pod.Status.PodIP + ":1"); err == nil {
			t.Errorf("helm test passed against a closed port: the test pod checks nothing\n%s", out)
		} else {
			log, _ := tb.PodLog(releaseNS, "certdrift-healthcheck", "healthcheck")
			t.Logf("OBSERVED: helm test against %s:1 failed as it must: %s", pod.Status.PodIP, tail(log, 2))
		}
		start := time.Now()
		out, err := helmTest(pod.Status.PodIP + ":9809")
		if err != nil {
			log, _ := tb.PodLog(releaseNS, "certdrift-healthcheck", "healthcheck")
			t.Fatalf("helm test: %v\n%s\ntest pod log:\n%s", err, out, log)
		}
		if !strings.Contains(string(out), "Succeeded") {
			t.Errorf("helm test output does not report the test pod Succeeded:\n%s", out)
		}
		t.Logf("OBSERVED: helm test passed in %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)
	})
}

// sampleValue is the value of the first sample of an unlabelled metric in a text exposition.
func sampleValue(expo, name string) (float64, bool) {
	for _, line := range strings.Split(expo, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// waitPods waits for want Ready pods matching selector.
func waitPods(ctx context.Context, t *testing.T, tb *testbed.Testbed, ns, selector string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	pollT(ctx, t, fmt.Sprintf("%d Ready pods %s in %s", want, selector, ns), func() error {
		var err error
		pods, err = tb.WaitPodsReady(ctx, ns, selector)
		if err != nil {
			return err
		}
		if len(pods) != want {
			return fmt.Errorf("%d pods", len(pods))
		}
		return nil
	})
	return pods
}

func pollT(ctx context.Context, t *testing.T, what string, fn func() error) {
	t.Helper()
	var err error
	for {
		if err = fn(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scrape GETs /metrics from the certdrift pod through the node's pod dialer (what a
// port-forward reaches) and returns the exposition.
func scrape(ctx context.Context, tb *testbed.Testbed, pod string) (string, error) {
	conn, err := tb.DialPod(ctx, releaseNS, pod, 9809)
	if err != nil {
		return "", fmt.Errorf("dial %s/%s:9809: %w", releaseNS, pod, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: certdrift\r\nConnection: close\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: status %d", resp.StatusCode)
	}
	return string(b), err
}

// staleFindings lists "CODE pod" for the certdrift_finding series of the static-tls namespace
// with a STALE_* code, and whether the kubernetes source is up.
func staleFindings(exposition string) (out []string, sourceUp bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if strings.HasPrefix(line, `certdrift_source_up{source="kubernetes"} 1`) {
			sourceUp = true
		}
		if !strings.HasPrefix(line, "certdrift_finding{") || !strings.Contains(line, `namespace="`+staticNS+`"`) {
			continue
		}
		code, pod := label(line, "code"), label(line, "pod")
		if strings.HasPrefix(code, "STALE_") {
			out = append(out, code+" "+pod)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), sourceUp
}

func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// pollFindings scrapes until the stale findings are exactly want and the Kubernetes source is up.
func pollFindings(ctx context.Context, t *testing.T, tb *testbed.Testbed, pod string, want []string) []string {
	t.Helper()
	var got []string
	ctx2, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		expo, err := scrape(ctx2, tb, pod)
		var up bool
		if err == nil {
			got, up = staleFindings(expo)
			if up && cmp.Equal(want, got) {
				return got
			}
			err = fmt.Errorf("kubernetes source up %v, stale findings (-want +got):\n%s", up, cmp.Diff(want, got))
		}
		select {
		case <-ctx2.Done():
			log, _ := tb.PodLog(releaseNS, pod, "certdrift")
			t.Fatalf("certdrift pod %s never exported the stale findings: %v\npod log tail:\n%s", pod, err, tail(log, 30))
		case <-time.After(time.Second):
		}
	}
}

// checkNoForbidden fails when the certdrift pod's log shows an API request refused by RBAC: the
// profile must be enough for serve mode.
func checkNoForbidden(t *testing.T, tb *testbed.Testbed, pod string) {
	t.Helper()
	log, err := tb.PodLog(releaseNS, pod, "certdrift")
	if err != nil {
		t.Fatalf("log of %s: %v", pod, err)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("certdrift pod %s was refused an API request: %s", pod, line)
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func podLogs(ctx context.Context, tb *testbed.Testbed) string {
	pods, err := tb.Client.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		log, _ := tb.PodLog(releaseNS, p.Name, "certdrift")
		fmt.Fprintf(&b, "--- pod %s (%s):\n%s\n", p.Name, p.Status.Phase, tail(log, 30))
	}
	return b.String()
}

// auditAs runs `certdrift audit --reload --yes` with a kubeconfig holding a token of the
// release's ServiceAccount (the credentials the certdrift pod has), never the admin's.
func auditAs(ctx context.Context, t *testing.T, tb *testbed.Testbed, bin, dir, name string, extra ...string) (int, reloadReport, string) {
	t.Helper()
	code, stdout, all := certdriftAs(ctx, t, tb, bin, dir, name, append([]string{"--reload", "--yes", "--reload-budget", "1",
		"--reload-refusal-wait", "2s"}, extra...)...)
	var rep reloadReport
	if err := json.Unmarshal(stdout, &rep); err != nil {
		t.Fatalf("audit %s: exit %d, not JSON: %v\n%s", name, code, err, all)
	}
	return code, rep, all
}

// certdriftAs runs `certdrift audit -o json` on static-tls as the release's ServiceAccount and
// returns its exit code, stdout and whole output.
func certdriftAs(ctx context.Context, t *testing.T, tb *testbed.Testbed, bin, dir, name string, extra ...string) (int, []byte, string) {
	t.Helper()
	ttl := int64(600)
	tok, err := tb.Client.CoreV1().ServiceAccounts(releaseNS).CreateToken(ctx, release,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for ServiceAccount %s/%s: %v", releaseNS, release, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testbed"] = &clientcmdapi.Cluster{Server: tb.Config.Host, CertificateAuthorityData: tb.CAPEM()}
	cfg.AuthInfos["certdrift"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["testbed"] = &clientcmdapi.Context{Cluster: "testbed", AuthInfo: "certdrift"}
	cfg.CurrentContext = "testbed"
	kc := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	args := append([]string{"audit", "--kubeconfig", kc, "--namespace", staticNS, "--grace", "1s", "-o", "json"}, extra...)
	cmd := exec.CommandContext(actx, bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run certdrift audit: %v", err)
	}
	all := stdout.String() + stderr.String()
	if strings.Contains(all, "PRIVATE KEY") || strings.Contains(all, tok.Status.Token) {
		t.Fatal("certdrift printed a private key or the token")
	}
	return code, stdout.Bytes(), all
}

type reloadReport struct {
	Reload struct {
		DryRun  bool `json:"dry_run"`
		Results []struct {
			Outcome string `json:"outcome"`
			Detail  string `json:"detail"`
			Target  struct {
				Pod string `json:"pod"`
			} `json:"target"`
		} `json:"results"`
	} `json:"reload"`
}

type outcome struct{ Target, Outcome, Detail string }

func reloadOutcomes(r reloadReport) []outcome {
	var out []outcome
	for _, x := range r.Reload.Results {
		out = append(out, outcome{Target: x.Target.Pod, Outcome: x.Outcome, Detail: x.Detail})
	}
	return out
}
