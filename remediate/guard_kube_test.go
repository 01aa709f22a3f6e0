package remediate

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/kubeapi"
)

var errBadLeaf = errors.New("serves sha256 0123, not the desired certificate")

// webDeployment creates Deployment/web with n replicas in ns and returns its pods once the
// controllers made them. There is no node: the test plays the kubelet by writing pod status.
func webDeployment(ctx context.Context, t *testing.T, c *kubeapi.Client, ns string, n int32) []corev1.Pod {
	t.Helper()
	labels := map[string]string{"app": "web"}
	_, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "example.invalid/nothing"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Deployment/web: %v", err)
	}
	for {
		pods, err := workloadPods(ctx, c, Workload{Namespace: ns, Kind: "Deployment", Name: "web"})
		if err == nil && int32(len(pods)) == n {
			return pods
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Deployment/web never got %d pods (%d, %v)", n, len(pods), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// setReady writes the pod's status as a kubelet would: Running, and Ready or not.
func setReady(ctx context.Context, t *testing.T, c *kubeapi.Client, ns, name string, ready bool) {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set pod %s Ready=%v: %v", name, ready, err)
	}
}

func eventCount(ctx context.Context, t *testing.T, c *kubeapi.Client, ns, reason string) int {
	t.Helper()
	list, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Reason == reason && e.InvolvedObject.Kind == "Deployment" && e.InvolvedObject.Name == "web" {
			n++
		}
	}
	return n
}

// TestPreflightOnControlPlane: the checks before an action, against a real API server, in the
// order an operator meets them: the Ready floor; another run's action still within its
// deadline; an interrupted action (its process stopped, or a leader lost the Lease) verified by
// the next run, or recorded as failed with a Warning Event and a failed count, which then blocks;
// a dry run that writes nothing; and the block lifted once every replica is Ready again.
func TestPreflightOnControlPlane(t *testing.T) {
	tb := controlPlane(t)
	ns, leaseNS := testNamespace(t, tb), testNamespace(t, tb)
	c := newClient(t, tb, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods := webDeployment(ctx, t, c, ns, 3)
	for _, p := range pods {
		setReady(ctx, t, c, ns, p.Name, true)
	}
	var verified [][]string
	verifyErr := error(nil)
	m := &recorder{}
	e := &Executor{Client: c, LeaseNamespace: leaseNS, Log: slog.New(slog.DiscardHandler), Timeout: 3 * time.Minute, Now: time.Now, Metrics: m,
		Verify: func(_ context.Context, _ Action, envoys []string) (string, error) {
			verified = append(verified, slices.Sorted(slices.Values(envoys)))
			return "serves the desired leaf", verifyErr
		}}
	target := pods[0].Name
	a := Action{Strategy: Evict, Target: Target{Envoy: ns + "/" + target, Namespace: ns, Pod: target, Workload: Workload{Namespace: ns, Kind: "Deployment", Name: "web"}}}
	step := func(what string, dryRun bool, wantSkip, wantReason string) {
		t.Helper()
		skip, why, reason := e.preflight(ctx, a, dryRun)
		if skip != wantSkip || reason != wantReason {
			t.Fatalf("%s: preflight skip %q reason %q (%s), want %q %q", what, skip, reason, why, wantSkip, wantReason)
		}
	}
	record := func(r Record) {
		t.Helper()
		if err := writeRecord(ctx, c, leaseNS, Workload{Namespace: ns, Kind: "Deployment", Name: "web"}, r); err != nil {
			t.Fatal(err)
		}
	}
	state := func() Record {
		t.Helper()
		r, ok, err := ReadRecord(ctx, c, leaseNS, Workload{Namespace: ns, Kind: "Deployment", Name: "web"})
		if err != nil || !ok {
			t.Fatalf("read record: ok %v, %v", ok, err)
		}
		return r
	}

	step("3 of 3 Ready, nothing recorded", false, "", "")

	setReady(ctx, t, c, ns, pods[2].Name, false)
	step("2 of 3 Ready: evicting a Ready pod would leave 1", false, SkipTooFewReady, "")
	setReady(ctx, t, c, ns, pods[2].Name, true)

	now := time.Now()
	record(Record{At: now.Add(-time.Minute), State: StateActing, Since: now.Add(-time.Minute), Strategy: Evict, Target: ns + "/gone-1"})
	step("another run evicted a minute ago, within its deadline", false, SkipReplacementNotReady, "")

	long := now.Add(-10 * time.Minute)
	record(Record{At: long, State: StateActing, Since: long, Strategy: Evict, Target: ns + "/gone-1"})
	step("interrupted long ago, replacements Ready and verified now", false, "", "")
	if r := state(); r.State != StateDone {
		t.Errorf("after verifying the interrupted action the record is %q, want done", r.State)
	}
	want := slices.Sorted(slices.Values([]string{ns + "/" + pods[0].Name, ns + "/" + pods[1].Name, ns + "/" + pods[2].Name}))
	if len(verified) != 1 || !slices.Equal(verified[0], want) {
		t.Errorf("post-check asked for %v, want once for the pods created since the action %v", verified, want)
	}

	record(Record{At: long, State: StateActing, Since: long, Strategy: Evict, Target: ns + "/gone-1"})
	verifyErr = errBadLeaf
	step("dry run: an interrupted action that does not verify is reported, not recorded", true, SkipBlocked, ReasonUnverified)
	if r := state(); r.State != StateActing {
		t.Errorf("a dry run wrote the record: %q, want still acting", r.State)
	}
	if n := eventCount(ctx, t, c, ns, "CertdriftReloadUnverified"); n != 0 {
		t.Errorf("a dry run recorded %d Events", n)
	}
	step("interrupted long ago, the replacement does not serve the desired certificate", false, SkipBlocked, ReasonUnverified)
	if r := state(); r.State != StateFailed || r.Reason != ReasonUnverified {
		t.Errorf("record %q/%q, want failed/unverified", r.State, r.Reason)
	}
	if n := eventCount(ctx, t, c, ns, "CertdriftReloadUnverified"); n != 1 {
		t.Errorf("%d CertdriftReloadUnverified Events on Deployment/web, want 1", n)
	}
	if !slices.Contains(m.lines, "evict failed true") {
		t.Errorf("metrics %v: the unverified action is not counted failed", m.lines)
	}
	verifyErr = nil
	step("blocked stays blocked, however healthy the pods look, until lifted", false, SkipBlocked, ReasonUnverified)

	setReady(ctx, t, c, ns, pods[1].Name, false)
	web := Workload{Namespace: ns, Kind: "Deployment", Name: "web"}
	if got := e.RecoverBlocked(ctx, []Workload{web}); len(got) != 0 {
		t.Errorf("lifted %v with a replica not Ready", got)
	}
	setReady(ctx, t, c, ns, pods[1].Name, true)
	if got := e.RecoverBlocked(ctx, []Workload{web}); !slices.Equal(got, []Workload{web}) {
		t.Errorf("lifted %v, want Deployment/web once all 3 replicas are Ready", got)
	}
	if r := state(); r.State != StateRecovered {
		t.Errorf("record %q after recovery, want recovered", r.State)
	}
	if n := eventCount(ctx, t, c, ns, "CertdriftReloadRecovered"); n != 1 {
		t.Errorf("%d CertdriftReloadRecovered Events, want 1", n)
	}
	step("recovered: acting is allowed again", false, "", "")
}
