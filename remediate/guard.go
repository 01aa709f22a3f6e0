package remediate

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/kubeapi"
)

// Replicas is what the pre-action check knows of a workload just before an action.
type Replicas struct {
	// Desired replicas (a DaemonSet's desired number scheduled) and Ready pods now.
	Desired, Ready int32
	// TargetReady: the action takes a Ready pod out of service (evict or admin-quit of a Ready
	// pod; a rollout restart always counts as one).
	TargetReady bool
}

// Floor is the least number of Ready replicas an action may leave: one below the desired
// count. A PodDisruptionBudget that asks for more is enforced by the Eviction API itself (the
// eviction is refused, and reported as refused), so certdrift does not read PDBs: that would
// need the policy group and list rights on PodDisruptionBudgets.
func (r Replicas) Floor() int32 { return r.Desired - 1 }

// checkReplicas is the pure part of the pre-action check: an action must not take the Ready
// replicas below Floor. It returns a skip reason and why, or "".
func checkReplicas(workload string, r Replicas) (string, string) {
	after := r.Ready
	if r.TargetReady {
		after--
	}
	if after < r.Floor() {
		return SkipTooFewReady, fmt.Sprintf("%s has %d of %d replicas Ready: acting would leave %d, below %d",
			workload, r.Ready, r.Desired, after, r.Floor())
	}
	return "", ""
}

// checkRecord is the pure part of the check on the workload's last action: a failed one
// blocks; one still acting (another run or replica, within its deadline) makes this one wait.
func checkRecord(leaseNS string, w Workload, rec Record, now time.Time, timeout time.Duration) (string, string) {
	switch {
	case rec.Blocking():
		return SkipBlocked, fmt.Sprintf("%s is blocked: %s %s at %s ended %s (%s)%s; certdrift will not act on it again until all its replicas are Ready and serve the desired certificate, or a person clears it: %s",
			w, rec.Strategy, rec.Target, rec.Since.UTC().Format(time.RFC3339), rec.State, rec.Reason,
			detailSuffix(rec.Detail), ClearHint(leaseNS, w))
	case rec.State == StateActing && now.Sub(rec.Since) < timeout:
		return SkipReplacementNotReady, fmt.Sprintf("%s: %s %s began at %s and its replacement is not verified yet",
			w, rec.Strategy, rec.Target, rec.Since.UTC().Format(time.RFC3339))
	}
	return "", ""
}

func detailSuffix(d string) string {
	if d == "" {
		return ""
	}
	return ": " + d
}

// preflight runs before every action on a Kubernetes workload, in every run and every replica:
// the workload's last recorded action must have ended verified (an interrupted one is verified
// now, or recorded as failed), and the action must not take its Ready replicas below the floor.
// A dry run reads but writes nothing. It returns a skip reason and why, or "", and the failure
// reason of a block (for the metric).
func (e *Executor) preflight(ctx context.Context, a Action, dryRun bool) (skip, why, reason string) {
	t := a.Target
	if e.Client == nil || t.Workload.IsZero() {
		return "", "", ""
	}
	if !dryRun {
		if err := e.leaseNamespaceOK(ctx); err != nil {
			return SkipCannotCheck, fmt.Sprintf("not acting on %s: its cooldown and outcome could not be recorded: %v", t.WorkloadKey(), err), ""
		}
	}
	rec, ok, err := ReadRecord(ctx, e.Client, e.LeaseNamespace, t.Workload)
	if err != nil && !apierrors.IsForbidden(err) {
		return SkipCannotCheck, fmt.Sprintf("cannot read what became of the last action on %s: %v", t.WorkloadKey(), err), ""
	}
	if ok && rec.State == StateActing && e.Now().Sub(rec.Since) >= e.Timeout {
		rec = e.resolveActing(ctx, a, rec, dryRun)
	}
	if ok {
		if skip, why := checkRecord(e.LeaseNamespace, t.Workload, rec, e.Now(), e.Timeout); skip != "" {
			return skip, why, rec.Reason
		}
	}
	r, err := readReplicas(ctx, e.Client, a)
	if err != nil {
		return SkipCannotCheck, fmt.Sprintf("cannot count the Ready replicas of %s: %v", t.WorkloadKey(), err), ""
	}
	skip, why = checkReplicas(t.WorkloadKey(), r)
	return skip, why, ""
}

// leaseNamespaceOK checks once per Run that record Leases can be written (CheckLeaseNamespace).
func (e *Executor) leaseNamespaceOK(ctx context.Context) error {
	if !e.leaseChecked {
		e.leaseChecked, e.leaseErr = true, CheckLeaseNamespace(ctx, e.Client, e.LeaseNamespace)
	}
	return e.leaseErr
}

// blockedRecord says why the action's workload is blocked, or "" when it is not (or cannot be
// read: the preflight of an action that is not skipped reads it again).
func (e *Executor) blockedRecord(ctx context.Context, a Action) (why, reason string) {
	t := a.Target
	if e.Client == nil || t.Workload.IsZero() {
		return "", ""
	}
	rec, ok, err := ReadRecord(ctx, e.Client, e.LeaseNamespace, t.Workload)
	if err != nil || !ok || !rec.Blocking() {
		return "", ""
	}
	_, why = checkRecord(e.LeaseNamespace, t.Workload, rec, e.Now(), e.Timeout)
	return why, rec.Reason
}

// resolveActing settles an action whose process stopped before it knew the outcome (it was
// interrupted, or lost leadership): its replacements must be Ready and pass the post-check now,
// else it is recorded as failed, with a Warning Event and a failed count.
func (e *Executor) resolveActing(ctx context.Context, a Action, rec Record, dryRun bool) Record {
	t := a.Target
	pods, err := workloadPods(ctx, e.Client, t.Workload)
	var fresh []string
	notReady := 0
	if err == nil {
		for _, p := range pods {
			replacement := p.CreationTimestamp.Time.After(rec.At.Add(-time.Second))
			if rec.Strategy == AdminQuit {
				replacement = p.Namespace+"/"+p.Name == rec.Target
			}
			if !replacement || p.DeletionTimestamp != nil {
				continue
			}
			if !podReady(&p) {
				notReady++
				continue
			}
			fresh = append(fresh, p.Namespace+"/"+p.Name)
		}
	}
	var verr error
	switch {
	case err != nil:
		verr = err
	case notReady > 0 || len(fresh) == 0:
		verr = fmt.Errorf("%d replacement pods Ready, %d not Ready", len(fresh), notReady)
	case e.Verify == nil:
		verr = fmt.Errorf("no post-check available to verify replacements %s", strings.Join(fresh, ", "))
	default:
		_, verr = e.Verify(ctx, a, fresh)
	}
	now := e.Now()
	if verr == nil {
		rec.State, rec.Reason, rec.Since, rec.Detail = StateDone, "", now, "verified by a later run: "+strings.Join(fresh, ", ")
	} else {
		rec.State, rec.Reason, rec.Since = StateFailed, ReasonUnverified, now
		rec.Detail = fmt.Sprintf("the action's process stopped before verifying it, and its replacement is not Ready and serving the desired certificate: %v", verr)
	}
	if dryRun {
		return rec
	}
	next := rec
	next.At = time.Time{} // the cooldown still counts from the action
	if err := writeRecord(ctx, e.Client, e.LeaseNamespace, t.Workload, next); err != nil {
		e.Log.Warn("reload outcome not recorded", "workload", t.WorkloadKey(), "err", err)
	}
	if rec.State == StateFailed {
		e.warnEvent(ctx, Action{Target: Target{Namespace: t.Namespace, Workload: t.Workload}}, "CertdriftReloadUnverified",
			fmt.Sprintf("certdrift's %s of %s at %s was not verified: %s; no further reloads of this workload until it is healthy or %s",
				rec.Strategy, rec.Target, rec.At.UTC().Format(time.RFC3339), rec.Detail, ClearHint(e.LeaseNamespace, t.Workload)))
		if e.Metrics != nil {
			e.Metrics.ReloadAction(string(rec.Strategy), OutcomeFailed, true, now)
		}
	}
	return rec
}

// readReplicas counts a workload's desired and Ready replicas and what the action takes down.
func readReplicas(ctx context.Context, c *kubeapi.Client, a Action) (Replicas, error) {
	t := a.Target
	pods, err := workloadPods(ctx, c, t.Workload)
	if err != nil {
		return Replicas{}, err
	}
	var r Replicas
	for _, p := range pods {
		if podReady(&p) {
			r.Ready++
			if p.Name == t.Pod {
				r.TargetReady = true
			}
		}
	}
	if a.Strategy == RolloutRestart {
		r.TargetReady = true
	}
	if r.Desired, err = desiredReplicas(ctx, c, t.Workload); err != nil {
		return Replicas{}, err
	}
	return r, nil
}

func desiredReplicas(ctx context.Context, c *kubeapi.Client, w Workload) (int32, error) {
	namespace, name := w.Namespace, w.Name
	switch w.Kind {
	case "Deployment":
		d, err := c.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", w, err)
		}
		return specReplicas(d.Spec.Replicas), nil
	case "StatefulSet":
		d, err := c.AppsV1().StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", w, err)
		}
		return specReplicas(d.Spec.Replicas), nil
	case "DaemonSet":
		d, err := c.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", w, err)
		}
		return d.Status.DesiredNumberScheduled, nil
	case "ReplicaSet":
		d, err := c.AppsV1().ReplicaSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", w, err)
		}
		return specReplicas(d.Spec.Replicas), nil
	}
	return 0, fmt.Errorf("%s: not a Deployment, StatefulSet, DaemonSet or ReplicaSet", w)
}

// HealthyWorkloads are the workloads the report shows wholly converged: every binding of their
// pods converged, and no finding about them or their pods. Only these can lift a block
// (RecoverBlocked also checks that all desired replicas are Ready).
func HealthyWorkloads(r audit.Report) []Workload {
	healthy := map[Workload]bool{}
	var order []Workload
	envoyWorkload := map[string]Workload{}
	for _, b := range r.Bindings {
		if b.Workload == "" {
			continue
		}
		ns, _, _ := strings.Cut(b.Envoy, "/")
		w := ParseWorkload(ns, b.Workload)
		envoyWorkload[b.Envoy] = w
		if _, seen := healthy[w]; !seen {
			healthy[w] = true
			order = append(order, w)
		}
		if b.State != audit.StateConverged {
			healthy[w] = false
		}
	}
	for _, f := range r.Findings {
		if w, ok := envoyWorkload[f.Subject.Envoy]; ok {
			healthy[w] = false
		}
		if f.Subject.Workload != "" {
			// A finding about a workload names it "Kind/name", or "namespace/Kind/name".
			for w := range healthy {
				if strings.HasSuffix(w.String(), "/"+f.Subject.Workload) {
					healthy[w] = false
				}
			}
		}
	}
	var out []Workload
	for _, w := range order {
		if healthy[w] {
			out = append(out, w)
		}
	}
	return out
}

// RecoverBlocked lifts the block of each workload (see HealthyWorkloads) whose Lease records a
// failed action and whose desired replicas are all Ready now. It returns the workloads it
// unblocked.
func (e *Executor) RecoverBlocked(ctx context.Context, workloads []Workload) []Workload {
	if e.Client == nil {
		return nil
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	var out []Workload
	for _, w := range workloads {
		rec, ok, err := ReadRecord(ctx, e.Client, e.LeaseNamespace, w)
		if err != nil || !ok || !rec.Blocking() {
			continue
		}
		r, err := readReplicas(ctx, e.Client, Action{Strategy: Evict, Target: Target{Namespace: w.Namespace, Workload: w}})
		if err != nil || r.Ready < r.Desired {
			continue
		}
		next := Record{State: StateRecovered, Since: e.Now(), Strategy: rec.Strategy, Target: rec.Target,
			Detail: fmt.Sprintf("all %d replicas Ready and serving the desired certificate after %s (%s)", r.Desired, rec.State, rec.Reason)}
		if err := writeRecord(ctx, e.Client, e.LeaseNamespace, w, next); err != nil {
			e.logger().Warn("reload block not lifted", "workload", w.String(), "err", err)
			continue
		}
		e.logger().Info("reload block lifted: workload healthy again", "workload", w.String(), "was", rec.Reason)
		e.event(ctx, w.objectRef(), false, "CertdriftReloadRecovered", next.Detail)
		out = append(out, w)
	}
	return out
}
