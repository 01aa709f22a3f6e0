// Package repair proves `certdrift audit --reload` end to end on the testbed (test/testbed):
// after a rotation, the static-tls Envoy pods (a static TLS context, never reloading) are stale
// and the plain-sds pods converge by themselves. A dry run changes nothing; `--reload --yes`
// evicts the stale pods one at a time within the budget and the cooldown, the ReplicaSet
// replaces them, the replacements serve the new certificate, and the converged pods are never
// touched. A PodDisruptionBudget that allows no disruption makes the eviction a reported
// refusal with nothing forced; rollout-restart replaces the whole workload.
package repair

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

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
	"github.com/certdrift/certdrift/test/webtls"
)

const (
	webHost   = "web.example.com"
	syncDelay = 2 * time.Second
	grace     = 4 * time.Second
)

var certdriftBin string

func TestMain(m *testing.M) { cdbin.Main(m, &certdriftBin) }

type finding struct {
	Code    string `json:"code"`
	Subject struct {
		Envoy  string `json:"envoy"`
		Source string `json:"source"`
	} `json:"subject"`
	Message string `json:"message"`
}

type result struct {
	Strategy string `json:"strategy"`
	Target   struct {
		Envoy    string `json:"envoy"`
		Workload string `json:"workload"`
	} `json:"target"`
	Pods         []string `json:"pods"`
	Skip         string   `json:"skip"`
	Reason       string   `json:"reason"`
	Outcome      string   `json:"outcome"`
	Detail       string   `json:"detail"`
	Replacements []string `json:"replacements"`
}

// run is one certdrift audit: its exit code, findings, reload results and whole output.
type run struct {
	code     int
	findings []finding
	reload   []result
	dryRun   bool
	out      string
}

// certdrift keeps its reload records in its own namespace: audit --reload's default, and the
// namespace serve --remediate is given here (as $POD_NAMESPACE would be in a pod).
const (
	auditLeaseNS = "certdrift"
	serveLeaseNS = "default"
)

func audit(t *testing.T, tb *testbed.Testbed, keys [][]byte, extra ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The namespace an install of certdrift creates; audit --reload --yes refuses to act
	// without it (its records could not be kept).
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: auditLeaseNS}}
	if _, err := tb.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", auditLeaseNS, err)
	}
	args := append([]string{"audit", "--kubeconfig", tb.KubeconfigPath, "--namespace", "plain-sds,static-tls",
		"--grace", grace.String(), "-o", "json"}, extra...)
	res, err := cdbin.Run(ctx, certdriftBin, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, args...)
	if err != nil {
		t.Fatal(err)
	}
	r := run{code: res.Code, out: "$ certdrift " + strings.Join(args, " ") + "\n" + res.Output()}
	if cdbin.LeaksKey(r.out, keys) {
		t.Fatalf("certdrift printed private key material")
	}
	// -o json with --reload is one document: the report's fields and a "reload" section.
	var rep struct {
		Findings []finding `json:"findings"`
		Reload   *struct {
			DryRun  bool     `json:"dry_run"`
			Results []result `json:"results"`
		} `json:"reload"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
		t.Fatalf("certdrift exit %d: output is not one JSON document: %v\n%s", r.code, err, r.out)
	}
	r.findings = rep.Findings
	if rep.Reload != nil {
		r.reload, r.dryRun = rep.Reload.Results, rep.Reload.DryRun
	}
	for _, res := range r.reload {
		t.Logf("OBSERVED reload: %s %s%s -> %s (%s%s) %s %v", res.Strategy, res.Target.Envoy, res.Target.Workload, res.Outcome, res.Skip, res.Reason, res.Detail, res.Replacements)
	}
	return r
}

// deploy applies a web-tls scenario (test/webtls) serving leaf.
func deploy(ctx context.Context, t *testing.T, tb *testbed.Testbed, ns string, leaf *certs.Leaf) {
	t.Helper()
	webtls.Deploy(ctx, t, tb, ns, leaf)
}

func ready(ctx context.Context, t *testing.T, tb *testbed.Testbed, ns string) []corev1.Pod {
	t.Helper()
	pods, err := tb.WaitPodsReady(ctx, ns, "app=envoy")
	if err != nil {
		t.Fatalf("%s: pods not ready: %v", ns, err)
	}
	return pods
}

// uids are the pods' "namespace/name" → UID, to tell a touched pod from an untouched one.
func uids(pods []corev1.Pod) map[string]string {
	m := map[string]string{}
	for _, p := range pods {
		m[p.Namespace+"/"+p.Name] = string(p.UID)
	}
	return m
}

// rotate replaces web-tls in ns with leaf, waits for the pods' volumes to hold it and then out
// the grace period, so a pod that did not reload is provably stale.
func rotate(ctx context.Context, t *testing.T, tb *testbed.Testbed, ns string, leaf *certs.Leaf) {
	t.Helper()
	s, err := tb.Client.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Secret %s/web-tls: %v", ns, err)
	}
	s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey] = leaf.ChainPEM(), leaf.KeyPEM
	if _, err := tb.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("rotate Secret %s/web-tls: %v", ns, err)
	}
	rotated := time.Now()
	for _, p := range ready(ctx, t, tb, ns) {
		dir, err := tb.PodDir(p.Namespace, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for {
			got, err := os.ReadFile(filepath.Join(dir, "volumes", "tls", "tls.crt"))
			if err == nil && bytes.Equal(got, leaf.ChainPEM()) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("pod %s/%s never received the rotated Secret", p.Namespace, p.Name)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	time.Sleep(time.Until(rotated.Add(grace + 2*time.Second)))
}

func outcomes(rs []result) []string {
	var out []string
	for _, r := range rs {
		o := r.Strategy + " " + r.Outcome
		if r.Skip != "" {
			o += "/" + r.Skip
		}
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

func wantOutcomes(t *testing.T, what string, r run, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := outcomes(r.reload); !slices.Equal(got, want) {
		t.Fatalf("%s: reload outcomes %q, want %q\n%s", what, got, want, r.out)
	}
}

func TestRepair(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: syncDelay})
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	ca := certs.NewCA(t, certs.WithCommonName("e2e-repair-ca"))
	leaf := func() *certs.Leaf { return ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost)) }
	v1s, v1p := leaf(), leaf()
	keys := [][]byte{v1s.KeyPEM, v1p.KeyPEM}
	deploy(ctx, t, tb, "static-tls", v1s)
	deploy(ctx, t, tb, "plain-sds", v1p)
	sds := uids(ready(ctx, t, tb, "plain-sds"))

	v2s, v2p := leaf(), leaf()
	keys = append(keys, v2s.KeyPEM, v2p.KeyPEM)
	rotate(ctx, t, tb, "static-tls", v2s)
	rotate(ctx, t, tb, "plain-sds", v2p)
	stale := uids(ready(ctx, t, tb, "static-tls"))

	// A preview plans one eviction per stale pod and touches nothing.
	r := audit(t, tb, keys, "--reload")
	if !r.dryRun || r.code != 1 {
		t.Fatalf("dry run: dry_run %v exit %d, want true and 1\n%s", r.dryRun, r.code, r.out)
	}
	wantOutcomes(t, "dry run", r, "evict planned", "evict planned")
	for _, res := range r.reload {
		if _, ok := stale[res.Target.Envoy]; !ok || res.Target.Workload != "Deployment/envoy" {
			t.Errorf("dry run plans %s (%s), not a stale static-tls pod of Deployment/envoy", res.Target.Envoy, res.Target.Workload)
		}
	}
	if got := uids(ready(ctx, t, tb, "static-tls")); !mapsEqual(got, stale) {
		t.Fatalf("the dry run changed pods: %v, before %v", got, stale)
	}

	// A budget of one: one pod evicted, replaced, serving v2; the other left for later.
	r = audit(t, tb, keys, "--reload", "--yes", "--reload-budget", "1")
	wantOutcomes(t, "budget 1", r, "evict done", "evict skipped/budget")
	if r.code != 1 {
		t.Errorf("budget 1: exit %d, want 1 (findings, no failed action)\n%s", r.code, r.out)
	}
	for _, res := range r.reload {
		if res.Outcome == "done" {
			if len(res.Replacements) != 1 || !strings.Contains(res.Detail, "serves the desired leaf of static-tls/web-tls") {
				t.Errorf("evicted %s: replacements %v, post-check %q", res.Target.Envoy, res.Replacements, res.Detail)
			}
		}
	}
	// The cooldown keeps the second pod of the same workload for a later run.
	r = audit(t, tb, keys, "--reload", "--yes")
	wantOutcomes(t, "within cooldown", r, "evict skipped/cooldown")
	r = audit(t, tb, keys, "--reload", "--yes", "--reload-cooldown", "0s")
	wantOutcomes(t, "cooldown 0", r, "evict done")

	r = audit(t, tb, keys, "--reload")
	if r.code != 0 || len(r.findings) != 0 || len(r.reload) != 0 {
		t.Fatalf("after the repair: exit %d, %d findings, %d reload actions, want a clean audit\n%s", r.code, len(r.findings), len(r.reload), r.out)
	}
	if got := uids(ready(ctx, t, tb, "plain-sds")); !mapsEqual(got, sds) {
		t.Errorf("converged plain-sds pods were touched: %v, before %v", got, sds)
	}
	if evicted := evictedEvents(ctx, t, tb, "static-tls"); evicted != 2 {
		t.Errorf("%d CertdriftEvicted events in static-tls, want 2", evicted)
	}

	// A PDB that allows no disruption: the eviction is refused, reported, and nothing forced.
	zero := intstr.FromInt32(0)
	if _, err := tb.Client.PolicyV1().PodDisruptionBudgets("static-tls").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "envoy", Namespace: "static-tls"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "envoy"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PDB: %v", err)
	}
	v3s := leaf()
	keys = append(keys, v3s.KeyPEM)
	rotate(ctx, t, tb, "static-tls", v3s)
	stale = uids(ready(ctx, t, tb, "static-tls"))
	start := time.Now()
	r = audit(t, tb, keys, "--reload", "--yes", "--reload-cooldown", "0s", "--reload-refusal-wait", "3s", "--reload-budget", "1")
	wantOutcomes(t, "PDB", r, "evict refused", "evict skipped/budget")
	if r.code != 3 {
		t.Errorf("PDB: exit %d, want 3 (an action was refused)\n%s", r.code, r.out)
	}
	if d := time.Since(start); d > 90*time.Second {
		t.Errorf("PDB: the refused run took %s: the refusal was not reported promptly", d)
	}
	for _, res := range r.reload {
		if res.Outcome == "refused" && !strings.Contains(res.Detail, "disruption budget") {
			t.Errorf("refusal does not name the disruption budget: %q", res.Detail)
		}
	}
	if got := uids(ready(ctx, t, tb, "static-tls")); !mapsEqual(got, stale) {
		t.Fatalf("pods changed despite the PDB: %v, before %v", got, stale)
	}

	// rollout-restart replaces the whole workload (the PDB does not govern rollouts).
	if err := tb.Client.PolicyV1().PodDisruptionBudgets("static-tls").Delete(ctx, "envoy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r = audit(t, tb, keys, "--reload", "--yes", "--reload-cooldown", "0s", "--reload-strategy", "rollout-restart")
	wantOutcomes(t, "rollout-restart", r, "rollout-restart done")
	if len(r.reload[0].Replacements) != 2 {
		t.Errorf("rollout-restart replaced %v, want 2 new pods", r.reload[0].Replacements)
	}
	r = audit(t, tb, keys)
	if r.code != 0 || len(r.findings) != 0 {
		t.Fatalf("after the rollout restart: exit %d with %d findings, want clean\n%s", r.code, len(r.findings), r.out)
	}
	if got := uids(ready(ctx, t, tb, "plain-sds")); !mapsEqual(got, sds) {
		t.Errorf("converged plain-sds pods were touched: %v, before %v", got, sds)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// evictedEvents counts the CertdriftEvicted Events about pods in namespace.
func evictedEvents(ctx context.Context, t *testing.T, tb *testbed.Testbed, namespace string) int {
	t.Helper()
	events, err := tb.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events.Items {
		if e.Reason == "CertdriftEvicted" && e.InvolvedObject.Kind == "Pod" {
			n++
		}
	}
	return n
}
