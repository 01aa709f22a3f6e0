package repair

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

// Issue 14: a replacement that can never become Ready, and no PodDisruptionBudget. The static-tls
// Deployment runs 3 replicas, all stale after a rotation; then its bootstrap ConfigMap is given a
// field Envoy rejects, so every new pod crash-loops (the node agent renders the bootstrap at each
// container start, as a kubelet mounts the ConfigMap) while the running Envoys keep serving.

const replicas = 3

// readyWatch samples the Ready static-tls pods until stopped and keeps the lowest count seen.
type readyWatch struct {
	mu     sync.Mutex
	min    int
	at     time.Time
	stop   context.CancelFunc
	done   chan struct{}
	errors int
}

func watchReady(t *testing.T, tb *testbed.Testbed) *readyWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &readyWatch{min: replicas + 1, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			list, err := tb.Client.CoreV1().Pods("static-tls").List(ctx, metav1.ListOptions{LabelSelector: "app=envoy"})
			w.mu.Lock()
			if err != nil {
				w.errors++
			} else if n := countReady(list.Items); n < w.min {
				w.min, w.at = n, time.Now()
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *readyWatch) end() { w.stop(); <-w.done }

func (w *readyWatch) check(t *testing.T, what string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("OBSERVED %s: fewest Ready static-tls pods %d (at %s)", what, w.min, w.at.Format(time.RFC3339Nano))
	if w.min < replicas-1 {
		t.Fatalf("%s: Ready static-tls pods fell to %d at %s, below replicas−1 = %d", what, w.min, w.at.Format(time.RFC3339Nano), replicas-1)
	}
}

func countReady(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// crashLoopSetup deploys static-tls with 3 replicas, rotates its Secret so that all three are
// stale, and breaks the bootstrap so that any new pod crash-loops. It returns the CA's leaf
// maker, the keys to watch for, and a function that repairs the bootstrap.
func crashLoopSetup(ctx context.Context, t *testing.T, tb *testbed.Testbed) (keys [][]byte, fix func()) {
	t.Helper()
	ca := certs.NewCA(t, certs.WithCommonName("e2e-crashloop-ca"))
	leaf := func() *certs.Leaf { return ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost)) }
	v1, v2 := leaf(), leaf()
	keys = [][]byte{v1.KeyPEM, v2.KeyPEM}
	deploy(ctx, t, tb, "static-tls", v1)
	scale := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := tb.Client.AppsV1().Deployments("static-tls").Patch(ctx, "envoy", types.MergePatchType, scale, metav1.PatchOptions{}); err != nil {
		t.Fatalf("scale static-tls to %d: %v", replicas, err)
	}
	for {
		if pods := ready(ctx, t, tb, "static-tls"); len(pods) == replicas {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("static-tls never reached %d Ready replicas", replicas)
		case <-time.After(200 * time.Millisecond):
		}
	}
	rotate(ctx, t, tb, "static-tls", v2)

	cms := tb.Client.CoreV1().ConfigMaps("static-tls")
	cm, err := cms.Get(ctx, "envoy-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good := cm.Data["envoy.yaml"]
	// An unknown bootstrap field: Envoy refuses the config and exits at start.
	cm.Data["envoy.yaml"] = "certdrift_test_broken_field: true\n" + good
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("break the bootstrap ConfigMap: %v", err)
	}
	fix = func() {
		cm, err := cms.Get(ctx, "envoy-config", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["envoy.yaml"] = good
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("repair the bootstrap ConfigMap: %v", err)
		}
	}
	return keys, fix
}

// reloadLeaseName is the static-tls Deployment's reload record Lease.
const reloadLeaseName = "certdrift-reload.static-tls.deployment.envoy"

// reloadLease reads the workload's reload Lease annotations from leaseNS, certdrift's namespace
// (audit: auditLeaseNS; serve: the --remediate-lease-namespace startServe passes), and checks that
// nothing was written in the workload's namespace.
func reloadLease(ctx context.Context, t *testing.T, tb *testbed.Testbed, leaseNS string) map[string]string {
	t.Helper()
	l, err := tb.Client.CoordinationV1().Leases(leaseNS).Get(ctx, reloadLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reload lease %s/%s: %v", leaseNS, reloadLeaseName, err)
	}
	if ls, err := tb.Client.CoordinationV1().Leases("static-tls").List(ctx, metav1.ListOptions{}); err != nil || len(ls.Items) > 0 {
		t.Errorf("Leases in the workload's namespace static-tls: %d (%v), want none", len(ls.Items), err)
	}
	return l.Annotations
}

// events counts the Events in static-tls with reason, and says whether all were Warnings.
func events(ctx context.Context, t *testing.T, tb *testbed.Testbed, reason string) (n int, warnings bool) {
	t.Helper()
	list, err := tb.Client.CoreV1().Events("static-tls").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	warnings = true
	for _, e := range list.Items {
		if e.Reason == reason {
			n++
			warnings = warnings && e.Type == corev1.EventTypeWarning
		}
	}
	return n, warnings
}

// TestCrashLoopingReplacementAudit: three successive `audit --reload --yes` (no cooldown) on a
// workload whose replacements crash-loop evict one pod, record the unverified replacement, and
// from then on only skip; Ready never drops below replicas−1. Clearing the record by hand (the
// command the skip prints) leaves the Ready-replica floor in force. Once the bootstrap is fixed
// and the block cleared, the repair completes.
func TestCrashLoopingReplacementAudit(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: syncDelay})
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	keys, fix := crashLoopSetup(ctx, t, tb)
	w := watchReady(t, tb)
	flags := []string{"--reload", "--yes", "--reload-cooldown", "0s", "--reload-timeout", "20s"}

	r := audit(t, tb, keys, flags...)
	wantOutcomes(t, "first run", r, "evict failed", "evict skipped/blocked", "evict skipped/blocked")
	if r.code != 3 {
		t.Errorf("first run: exit %d, want 3 (an action failed)\n%s", r.code, r.out)
	}
	for _, res := range r.reload {
		if res.Outcome == "failed" && res.Reason != "replacement_not_ready" {
			t.Errorf("failed eviction has reason %q, want replacement_not_ready\n%s", res.Reason, r.out)
		}
	}
	for i := 2; i <= 3; i++ {
		r = audit(t, tb, keys, flags...)
		wantOutcomes(t, fmt.Sprintf("run %d", i), r, "evict skipped/blocked", "evict skipped/blocked")
		if r.code != 3 {
			t.Errorf("run %d: exit %d, want 3 (blocked)\n%s", i, r.code, r.out)
		}
		for _, res := range r.reload {
			if res.Reason != "replacement_not_ready" || !strings.Contains(res.Detail, "kubectl -n "+auditLeaseNS+" annotate lease "+reloadLeaseName) {
				t.Errorf("run %d: blocked skip with reason %q, detail %q: want replacement_not_ready and how to clear it", i, res.Reason, res.Detail)
			}
		}
	}
	w.check(t, "three audits")
	if n, _ := events(ctx, t, tb, "CertdriftEvicted"); n != 1 {
		t.Errorf("%d CertdriftEvicted events, want exactly 1", n)
	}
	if n, warn := events(ctx, t, tb, "CertdriftReloadUnverified"); n != 1 || !warn {
		t.Errorf("%d CertdriftReloadUnverified events (all Warnings: %v), want 1 Warning", n, warn)
	}
	ann := reloadLease(ctx, t, tb, auditLeaseNS)
	if ann["certdrift.dev/last-outcome"] != "failed" || ann["certdrift.dev/last-reason"] != "replacement_not_ready" {
		t.Errorf("reload lease annotations %v: want last-outcome failed, last-reason replacement_not_ready", ann)
	}

	// A person clears the record with the command the skip names; the replacement still
	// crash-loops, so the Ready floor alone keeps certdrift from evicting.
	var clear []string
	for _, res := range r.reload {
		if i := strings.Index(res.Detail, "kubectl "); i >= 0 {
			clear = strings.Fields(res.Detail[i+len("kubectl "):])
			break
		}
	}
	if out, err := tb.Kubectl(ctx, clear...); err != nil {
		t.Fatalf("clear the block with kubectl %v: %v\n%s", clear, err, out)
	}
	r = audit(t, tb, keys, flags...)
	wantOutcomes(t, "cleared, still crash-looping", r, "evict skipped/too_few_ready", "evict skipped/too_few_ready")
	w.check(t, "after clearing the block")

	// The bootstrap fixed: the crash-looping pod starts (with the rotated certificate), and the
	// two stale pods are replaced one at a time.
	fix()
	if pods, err := tb.WaitPodsReady(ctx, "static-tls", "app=envoy"); err != nil || len(pods) != replicas {
		t.Fatalf("after fixing the bootstrap: %d pods Ready, err %v", len(pods), err)
	}
	r = audit(t, tb, keys, flags...)
	wantOutcomes(t, "fixed", r, "evict done", "evict done")
	w.check(t, "repair after the fix")
	r = audit(t, tb, keys)
	if r.code != 0 || len(r.findings) != 0 {
		t.Fatalf("after the repair: exit %d with %d findings, want clean\n%s", r.code, len(r.findings), r.out)
	}
	if ann := reloadLease(ctx, t, tb, auditLeaseNS); ann["certdrift.dev/last-outcome"] != "done" {
		t.Errorf("reload lease annotations %v after the repair: want last-outcome done", ann)
	}
}

// metricLines are the exporter's /metrics lines that start with prefix.
func (e *exporter) metricLines(prefix string) ([]string, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(e.url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out, nil
}

const blockedSeries = `certdrift_reload_blocked{namespace="static-tls",reason="replacement_not_ready",workload="Deployment/envoy"} 1`

// waitMetrics polls e until cond holds on its action counts and blocked series, or fails.
func waitMetrics(ctx context.Context, t *testing.T, e *exporter, what string, within time.Duration,
	cond func(actions map[string]float64, blocked []string) bool) (map[string]float64, []string) {
	t.Helper()
	deadline := time.Now().Add(within)
	var a map[string]float64
	var b []string
	var err error
	for {
		a, err = e.actions()
		if err == nil {
			b, err = e.metricLines("certdrift_reload_blocked{")
		}
		if err == nil && cond(a, b) {
			t.Logf("OBSERVED %s: %s actions %v, blocked %q", what, e.name, a, b)
			return a, b
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %s; %s actions %v, blocked %q, err %v", what, within, e.name, a, b, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestCrashLoopingReplacementServe: `serve --remediate` with a 5 s cooldown on a workload whose
// replacements crash-loop evicts one pod, counts it failed, says so in a Warning Event, a blocked
// series and its Lease, and evicts nothing more over many cooldowns, nor after the leader hands
// over to another replica; Ready never drops below replicas−1. When the workload is healthy
// again (bootstrap fixed, rolled out by hand), the leader lifts the block by itself.
func TestCrashLoopingReplacementServe(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: syncDelay})
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	_, fix := crashLoopSetup(ctx, t, tb)
	w := watchReady(t, tb)
	const cooldown = 5 * time.Second
	flags := []string{"--remediate-cooldown", cooldown.String(), "--remediate-timeout", "15s"}

	a := startServe(t, tb, "replica-a", flags...)
	waitMetrics(ctx, t, a, "first eviction unverified, workload blocked", 4*time.Minute, func(m map[string]float64, b []string) bool {
		return m["failed"] >= 1 && slices.Contains(b, blockedSeries)
	})
	failedAt := time.Now()
	before, _ := a.actions()
	// Many cooldowns, many rounds: still one eviction.
	m, _ := waitMetrics(ctx, t, a, "six cooldowns later", 3*time.Minute, func(m map[string]float64, b []string) bool {
		return time.Since(failedAt) > 6*cooldown && m["skipped"] >= before["skipped"]+10 && slices.Contains(b, blockedSeries)
	})
	if m["failed"] != 1 || m["done"] != 0 || m["refused"] != 0 {
		t.Errorf("replica-a actions %v: want exactly one failed, none done or refused", m)
	}
	w.check(t, "serve over six cooldowns")
	if n, _ := events(ctx, t, tb, "CertdriftEvicted"); n != 1 {
		t.Errorf("%d CertdriftEvicted events, want exactly 1", n)
	}
	if n, warn := events(ctx, t, tb, "CertdriftReloadUnverified"); n != 1 || !warn {
		t.Errorf("%d CertdriftReloadUnverified events (all Warnings: %v), want 1 Warning", n, warn)
	}
	if ann := reloadLease(ctx, t, tb, serveLeaseNS); ann["certdrift.dev/last-outcome"] != "failed" || ann["certdrift.dev/last-reason"] != "replacement_not_ready" {
		t.Errorf("reload lease annotations %v: want last-outcome failed, last-reason replacement_not_ready", ann)
	}

	// Leader change: replica-b takes over when replica-a stops, and sees the block too.
	b := startServe(t, tb, "replica-b", flags...)
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitMetrics(ctx, t, b, "new leader sees the block", 2*time.Minute, func(m map[string]float64, bl []string) bool {
		return m["skipped"] >= 10 && slices.Contains(bl, blockedSeries)
	})
	if m, _ := b.actions(); m["failed"] != 0 || m["done"] != 0 {
		t.Errorf("replica-b actions %v: want nothing failed or done", m)
	}
	if n, _ := events(ctx, t, tb, "CertdriftEvicted"); n != 1 {
		t.Errorf("%d CertdriftEvicted events after the leader change, want still 1", n)
	}
	w.check(t, "after the leader change")

	// A person fixes the bootstrap and rolls the workload out: healthy again, the block lifts.
	fix()
	if out, err := tb.Kubectl(ctx, "-n", "static-tls", "rollout", "restart", "deployment/envoy"); err != nil {
		t.Fatalf("rollout restart: %v\n%s", err, out)
	}
	waitMetrics(ctx, t, b, "block lifted once healthy", 4*time.Minute, func(_ map[string]float64, bl []string) bool {
		return len(bl) == 0 && reloadLease(ctx, t, tb, serveLeaseNS)["certdrift.dev/last-outcome"] == "recovered"
	})
	if n, _ := events(ctx, t, tb, "CertdriftReloadRecovered"); n != 1 {
		t.Errorf("%d CertdriftReloadRecovered events, want 1", n)
	}
}
