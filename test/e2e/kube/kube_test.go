// Package kube proves the Kubernetes mode end to end: the built certdrift binary, given only a
// kubeconfig, audits real Envoy pods of the testbed (test/testbed) that serve a rotated Secret,
// finds the pods of the static-tls scenario stale and the file-based SDS pods of plain-sds
// converged, then the plain-sds pods stale (loaded and served) after a rotation Envoy rejects.
package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
	"github.com/certdrift/certdrift/test/webtls"
)

const (
	webHost   = "web.example.com"
	syncDelay = 2 * time.Second
	// grace is passed as --grace: longer than a volume sync plus SDS reload, so the converged
	// pods are judged converged, and short enough for a test.
	grace = 4 * time.Second
)

var certdriftBin string

func TestMain(m *testing.M) { cdbin.Main(m, &certdriftBin) }

// report is the part of certdrift's JSON report the test reads.
type report struct {
	Bindings []struct {
		Envoy  string `json:"envoy"`
		Source string `json:"source"`
		Secret string `json:"secret"`
		File   string `json:"file"`
		Origin string `json:"origin"`
		State  string `json:"state"`
	} `json:"bindings"`
	Findings []struct {
		Code    string `json:"code"`
		Subject struct {
			Envoy  string `json:"envoy"`
			Source string `json:"source"`
			SNI    string `json:"sni"`
		} `json:"subject"`
		Message string `json:"message"`
	} `json:"findings"`
	Reload *struct {
		Results []struct {
			Strategy string `json:"strategy"`
			Target   struct {
				Envoy string `json:"envoy"`
			} `json:"target"`
			Outcome string `json:"outcome"`
			Skip    string `json:"skip"`
			Detail  string `json:"detail"`
		} `json:"results"`
	} `json:"reload"`
}

// audit runs certdrift in Kubernetes mode as the testbed's admin and returns its exit code,
// parsed report and output.
func audit(t *testing.T, tb *testbed.Testbed, keys [][]byte) (int, report, string) {
	t.Helper()
	return auditWith(t, tb.KubeconfigPath, keys)
}

// auditWith runs certdrift with kubeconfig and extra flags.
func auditWith(t *testing.T, kubeconfig string, keys [][]byte, extra ...string) (int, report, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"audit", "--kubeconfig", kubeconfig,
		"--namespace", "plain-sds,static-tls", "--grace", grace.String(), "-o", "json", "--log.level", "debug"}, extra...)
	res, err := cdbin.Run(ctx, certdriftBin, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, args...)
	if err != nil {
		t.Fatal(err)
	}
	code, out := res.Code, res.Output()
	// No output may carry key material: neither a PEM private key nor the base64 body of ours.
	for _, k := range keys {
		body := pemBody(k)
		if strings.Contains(out, "PRIVATE KEY") || (body != "" && strings.Contains(out, body)) {
			t.Fatalf("certdrift printed private key material")
		}
	}
	var r report
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("certdrift exit %d: report is not JSON: %v\n%s", code, err, out)
	}
	return code, r, out
}

// pemBody is a stretch of a PEM block's base64, enough to recognise it in output.
func pemBody(p []byte) string {
	lines := strings.Split(string(p), "\n")
	if len(lines) < 3 {
		return ""
	}
	return lines[1]
}

// waitVolume waits until each pod's Secret volume holds want as tls.crt: the rotation reached
// the pods, so what Envoy holds from then on is Envoy's doing.
func waitVolume(ctx context.Context, t *testing.T, tb *testbed.Testbed, pods []corev1.Pod, want []byte) {
	t.Helper()
	for _, p := range pods {
		dir, err := tb.PodDir(p.Namespace, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for {
			got, err := os.ReadFile(filepath.Join(dir, "volumes", "tls", "tls.crt"))
			if err == nil && bytes.Equal(got, want) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("pod %s/%s volume tls never held the rotated tls.crt (last error %v)", p.Namespace, p.Name, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// TestKubeAudit: before rotation every pod of both scenarios is converged and the audit exits 0;
// after rotating both web-tls Secrets and waiting past --grace, the static-tls pods are
// STALE_SERVED and STALE_LOADED, the plain-sds pods converged with their SDS secret bound, and
// the audit exits 1. Rotating plain-sds again to a certificate with the wrong key leaves its
// pods on the old pair: KEY_MISMATCH, ROTATION_FAILED, STALE_SERVED and STALE_LOADED.
func TestKubeAudit(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: syncDelay})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	ca := certs.NewCA(t, certs.WithCommonName("e2e-kube-ca"))
	v1 := map[string]*certs.Leaf{}
	v2 := map[string]*certs.Leaf{}
	pods := map[string][]corev1.Pod{}
	var keys [][]byte
	for _, ns := range []string{"plain-sds", "static-tls"} {
		v1[ns] = ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost))
		v2[ns] = ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost))
		keys = append(keys, v1[ns].KeyPEM, v2[ns].KeyPEM)
		pods[ns] = webtls.Deploy(ctx, t, tb, ns, v1[ns])
	}

	code, r, out := audit(t, tb, keys)
	t.Logf("before rotation: exit %d", code)
	if code != 0 || len(r.Findings) != 0 {
		t.Errorf("before rotation: exit %d with %d findings, want 0 and none\n%s", code, len(r.Findings), out)
	}
	for ns, ps := range pods {
		for _, p := range ps {
			checkBinding(t, r, ns+"/"+p.Name, ns+"/web-tls", "converged", out)
		}
	}
	// The same audit as a ServiceAccount with Roles in the two namespaces only (no cluster-wide
	// list anywhere) and Envoy admin through the API server's port-forward only.
	saKubeconfig := namespacedServiceAccount(ctx, t, tb, "plain-sds", "static-tls")
	saCode, saReport, saOut := auditWith(t, saKubeconfig, keys, "--admin-access", "port-forward")
	if saCode != 0 || len(saReport.Findings) != 0 || len(saReport.Bindings) != len(r.Bindings) {
		t.Errorf("namespace-scoped ServiceAccount through port-forward: exit %d, %d findings, %d bindings; want 0, none, %d\n%s",
			saCode, len(saReport.Findings), len(saReport.Bindings), len(r.Bindings), saOut)
	}
	for _, b := range saReport.Bindings {
		if b.State != "converged" || b.Secret == "" && strings.HasPrefix(b.Envoy, "plain-sds/") {
			t.Errorf("ServiceAccount run: binding %+v: want converged, with the SDS secret for plain-sds (the loaded view came through port-forward)", b)
		}
	}
	// A namespace the ServiceAccount has no Role in: a clear error naming verb, resource and
	// namespace, not a hang or an empty clean report.
	code, out = auditNoJSON(t, saKubeconfig, "--namespace", "default")
	if code != 2 || !strings.Contains(out, "list") || !strings.Contains(out, "secrets") || !strings.Contains(out, `"default"`) {
		t.Errorf("ServiceAccount run in a namespace without a Role: exit %d, want 2 and an error naming list, secrets and \"default\"\n%s", code, out)
	}

	for ns := range pods {
		s, err := tb.Client.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get Secret %s/web-tls: %v", ns, err)
		}
		s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey] = v2[ns].ChainPEM(), v2[ns].KeyPEM
		if _, err := tb.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("rotate Secret %s/web-tls: %v", ns, err)
		}
	}
	rotated := time.Now()
	for ns, ps := range pods {
		waitVolume(ctx, t, tb, ps, v2[ns].ChainPEM())
	}
	// Past the grace period, with a margin for the Secret's change time having second precision.
	time.Sleep(time.Until(rotated.Add(grace + 2*time.Second)))

	code, r, out = audit(t, tb, keys)
	t.Logf("after rotation: exit %d", code)
	for _, f := range r.Findings {
		t.Logf("OBSERVED: %s %s %s: %s", f.Code, f.Subject.Envoy, f.Subject.Source, f.Message)
	}
	for _, b := range r.Bindings {
		t.Logf("OBSERVED: binding %s -> %s origin %s secret %q file %q state %s", b.Envoy, b.Source, b.Origin, b.Secret, b.File, b.State)
	}
	if code != 1 {
		t.Errorf("after rotation: exit %d, want 1\n%s", code, out)
	}
	for _, p := range pods["static-tls"] {
		envoy := "static-tls/" + p.Name
		for _, c := range []string{"STALE_SERVED", "STALE_LOADED"} {
			if !hasFinding(r, c, envoy, "static-tls/web-tls") {
				t.Errorf("pod %s: no %s finding for static-tls/web-tls\n%s", envoy, c, out)
			}
		}
		checkBinding(t, r, envoy, "static-tls/web-tls", "stale", out)
	}
	for _, p := range pods["plain-sds"] {
		envoy := "plain-sds/" + p.Name
		for _, f := range r.Findings {
			if f.Subject.Envoy == envoy {
				t.Errorf("pod %s converged through SDS but has finding %s: %s", envoy, f.Code, f.Message)
			}
		}
		checkBinding(t, r, envoy, "plain-sds/web-tls", "converged", out)
		checkSDSSecret(t, r, envoy, "plain-sds/web-tls", out)
	}
	for _, f := range r.Findings {
		if !strings.HasPrefix(f.Subject.Envoy, "static-tls/") {
			t.Errorf("unexpected finding %s (envoy %q source %q): %s", f.Code, f.Subject.Envoy, f.Subject.Source, f.Message)
		}
	}

	// A rotation Envoy must refuse: a new certificate with the old key. File-based SDS keeps the
	// old pair, so the loaded view (the certificate inlined under the SDS name, which only the
	// listener's watched directory ties to the Secret) is stale, not merely the served one.
	v3 := ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost), certs.WithFreshKey())
	keys = append(keys, v3.KeyPEM)
	s, err := tb.Client.CoreV1().Secrets("plain-sds").Get(ctx, "web-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Secret plain-sds/web-tls: %v", err)
	}
	s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey] = v3.ChainPEM(), v2["plain-sds"].KeyPEM
	if _, err := tb.Client.CoreV1().Secrets("plain-sds").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("rotate Secret plain-sds/web-tls to a mismatched pair: %v", err)
	}
	rotated = time.Now()
	waitVolume(ctx, t, tb, pods["plain-sds"], v3.ChainPEM())
	time.Sleep(time.Until(rotated.Add(grace + 2*time.Second)))

	code, r, out = audit(t, tb, keys)
	t.Logf("after a mismatched rotation: exit %d", code)
	for _, f := range r.Findings {
		t.Logf("OBSERVED: %s %s %s: %s", f.Code, f.Subject.Envoy, f.Subject.Source, f.Message)
	}
	if code != 1 {
		t.Errorf("after a mismatched rotation: exit %d, want 1\n%s", code, out)
	}
	if !hasFinding(r, "KEY_MISMATCH", "", "plain-sds/web-tls") {
		t.Errorf("no KEY_MISMATCH finding for plain-sds/web-tls\n%s", out)
	}
	for _, p := range pods["plain-sds"] {
		envoy := "plain-sds/" + p.Name
		for _, c := range []string{"STALE_SERVED", "STALE_LOADED", "ROTATION_FAILED"} {
			if !hasFinding(r, c, envoy, "plain-sds/web-tls") {
				t.Errorf("pod %s: no %s finding for plain-sds/web-tls\n%s", envoy, c, out)
			}
		}
		checkBinding(t, r, envoy, "plain-sds/web-tls", "stale", out)
		checkSDSSecret(t, r, envoy, "plain-sds/web-tls", out)
	}

	// Repair refuses to restart Envoys onto a broken Secret: a new process would reject the same
	// pair. Every stale plain-sds pod is skipped as bad_secret, and no pod goes away.
	_, r, out = auditWith(t, tb.KubeconfigPath, keys, "--reload", "--yes")
	skipped := map[string]bool{}
	if r.Reload != nil {
		for _, res := range r.Reload.Results {
			t.Logf("OBSERVED: reload %s %s: %s %s %s", res.Strategy, res.Target.Envoy, res.Outcome, res.Skip, res.Detail)
			if res.Outcome == "skipped" && res.Skip == "bad_secret" {
				skipped[res.Target.Envoy] = true
			} else if strings.HasPrefix(res.Target.Envoy, "plain-sds/") {
				t.Errorf("reload acted on %s although its Secret is broken: %s %s", res.Target.Envoy, res.Outcome, res.Detail)
			}
		}
	}
	for _, p := range pods["plain-sds"] {
		if !skipped["plain-sds/"+p.Name] {
			t.Errorf("reload did not skip plain-sds/%s as bad_secret\n%s", p.Name, out)
		}
		if _, err := tb.Client.CoreV1().Pods("plain-sds").Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("pod plain-sds/%s is gone after a reload onto a broken Secret: %v", p.Name, err)
		}
	}
}

// sdsSecret is the SDS secret name plain-sds's listener gives its certificate
// (test/scenarios/plain-sds/configmap.yaml).
const sdsSecret = "server_cert"

// checkSDSSecret fails unless envoy's binding to source names the SDS secret: what ties the
// certificate Envoy inlined in config_dump (the loaded view) to the Secret.
func checkSDSSecret(t *testing.T, r report, envoy, source, out string) {
	t.Helper()
	for _, b := range r.Bindings {
		if b.Envoy == envoy && b.Source == source {
			if b.Secret != sdsSecret {
				t.Errorf("binding %s -> %s names SDS secret %q (origin %s, file %q), want %q: the loaded view is not compared\n%s",
					envoy, source, b.Secret, b.Origin, b.File, sdsSecret, out)
			}
			return
		}
	}
	t.Errorf("no binding of %s to %s in the report\n%s", envoy, source, out)
}

func hasFinding(r report, code, envoy, source string) bool {
	return slices.ContainsFunc(r.Findings, func(f struct {
		Code    string `json:"code"`
		Subject struct {
			Envoy  string `json:"envoy"`
			Source string `json:"source"`
			SNI    string `json:"sni"`
		} `json:"subject"`
		Message string `json:"message"`
	}) bool {
		return f.Code == code && f.Subject.Envoy == envoy && f.Subject.Source == source
	})
}

// checkBinding fails unless the report binds envoy to source in the wanted state.
func checkBinding(t *testing.T, r report, envoy, source, state, out string) {
	t.Helper()
	for _, b := range r.Bindings {
		if b.Envoy == envoy && b.Source == source {
			if b.State != state {
				t.Errorf("binding %s -> %s is %s (origin %s, secret %q, file %q), want %s", envoy, source, b.State, b.Origin, b.Secret, b.File, state)
			}
			return
		}
	}
	t.Errorf("no binding of %s to %s in the report\n%s", envoy, source, out)
}

// namespacedServiceAccount creates the ServiceAccount certdrift/certdrift with a Role and
// RoleBinding in each namespace — read Secrets, ConfigMaps, Pods and ReplicaSets, create
// pods/portforward: the read-only profile plus port-forward — and returns a kubeconfig that
// authenticates with a token the API server issued for it.
func namespacedServiceAccount(ctx context.Context, t *testing.T, tb *testbed.Testbed, namespaces ...string) string {
	t.Helper()
	c := tb.Client
	const ns, name = "certdrift", "certdrift"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount: %v", err)
	}
	read := []string{"get", "list", "watch"}
	for _, target := range namespaces {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "certdrift-read", Namespace: target}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps", "pods"}, Verbs: read},
			{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: read},
			{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"create", "get"}},
		}}
		if _, err := c.RbacV1().Roles(target).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Role in %s: %v", target, err)
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "certdrift-read", Namespace: target},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "certdrift-read"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}
		if _, err := c.RbacV1().RoleBindings(target).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create RoleBinding in %s: %v", target, err)
		}
	}
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("issue a token for the ServiceAccount: %v", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testbed"] = &clientcmdapi.Cluster{Server: tb.Config.Host, CertificateAuthorityData: tb.CAPEM()}
	kc.AuthInfos["certdrift"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["certdrift"] = &clientcmdapi.Context{Cluster: "testbed", AuthInfo: "certdrift"}
	kc.CurrentContext = "certdrift"
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func ptr[T any](v T) *T { return &v }

// auditNoJSON runs certdrift for a run expected to fail before any report: exit code and output.
func auditNoJSON(t *testing.T, kubeconfig string, extra ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := cdbin.Run(ctx, certdriftBin, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()},
		append([]string{"audit", "--kubeconfig", kubeconfig, "--sync-timeout", "20s"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return res.Code, res.Output()
}
