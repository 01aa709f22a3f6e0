package remediate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certdrift/certdrift/kubeapi"
)

// Outcome of one action: a closed set, for scripts and metrics.
const (
	OutcomePlanned = "planned" // dry run: would act
	OutcomeSkipped = "skipped" // the planner or an earlier failure decided not to act
	OutcomeDone    = "done"    // acted, and the post-check saw the desired certificate served
	OutcomeRefused = "refused" // the cluster refused (PDB); nothing was forced
	OutcomeFailed  = "failed"  // the action or its post-check failed
)

// Outcomes lists every outcome, for metrics that declare their series up front.
var Outcomes = []string{OutcomeDone, OutcomeRefused, OutcomeFailed, OutcomeSkipped, OutcomePlanned}

// Recorder counts each result of Run (collector.RepairMetrics). attempted is true when the
// action was carried out (done, refused or failed), false when it was only planned or skipped.
type Recorder interface {
	ReloadAction(strategy, outcome string, attempted bool, at time.Time)
}

// Result is an action and what became of it.
type Result struct {
	Action
	Outcome string `json:"outcome"`
	// Detail says what happened, or why not: the refusal, the error, what the post-check saw.
	Detail string `json:"detail,omitempty"`
	// Replacements are the pods that took over ("namespace/name"), for evict and rollout-restart.
	Replacements []string      `json:"replacements,omitempty"`
	Duration     time.Duration `json:"duration_ns,omitempty"`
	// Reason is the closed-set code of a failed action that disrupted a workload
	// (replacement_not_ready, post_check_failed, unverified), and of a skip it caused (blocked).
	Reason string `json:"reason,omitempty"`
}

// Verifier is the post-check: it observes pods (Kubernetes: "namespace/name") or a local Envoy
// (the target's name) again and says whether they now load and serve the desired certificate.
// It returns a one-line description of what it saw, and an error when they do not (yet).
type Verifier func(ctx context.Context, a Action, envoys []string) (string, error)

// AdminOpener reaches a pod's Envoy admin (through the pod IP or a port-forward); close ends
// the session.
type AdminOpener func(ctx context.Context, namespace, pod string) (baseURL string, hc *http.Client, close func(), err error)

// Executor carries out a plan, one action at a time.
type Executor struct {
	// Client is nil outside Kubernetes.
	Client *kubeapi.Client
	// LeaseNamespace is certdrift's own namespace, where every workload's reload record Lease
	// lives (state.go); Kubernetes actions are skipped without it.
	LeaseNamespace string
	Log            *slog.Logger
	// Timeout bounds one action: the eviction or patch, the wait for replacements or the
	// rollout, and the post-check.
	Timeout time.Duration
	// RefusalWait is how long a refused eviction is retried (honouring Retry-After).
	RefusalWait time.Duration
	// DrainWait is the pause between /drain_listeners and /quitquitquit.
	DrainWait time.Duration
	// Command is the exec strategy's argv.
	Command []string
	// AdminHTTP is used for admin-quit on a target's AdminURL when OpenAdmin is nil.
	AdminHTTP *http.Client
	OpenAdmin AdminOpener
	Verify    Verifier
	Now       func() time.Time
	// Metrics, when set, counts every result: one per action of every Run, skipped ones too.
	Metrics Recorder

	// leaseChecked, leaseErr: CheckLeaseNamespace's answer, asked once per Run.
	leaseChecked bool
	leaseErr     error
}

// Run executes the actions that the plan did not skip, in order, waiting for each to finish and
// pass its post-check before the next: never more than one pod of a workload is down at a time.
// Before each action on a Kubernetes workload it checks, whatever run or replica acted before,
// that the workload's last action ended verified and that the action leaves at least
// replicas − 1 Ready (preflight). A failed or unverified action is recorded in the workload's
// reload Lease and blocks it (state.go); a failure also stops every later action of this run on
// the same desired sources. A dry run only marks actions as planned, after the same checks.
func (e *Executor) Run(ctx context.Context, actions []Action, dryRun bool) []Result {
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	e.leaseChecked, e.leaseErr = false, nil
	var results []Result
	stopped := map[string]string{} // source → why later actions on it are stopped
	// Workloads a failure of this run blocks, in case the Lease could not be written.
	blocked := map[string]Result{}
	for _, a := range actions {
		r := Result{Action: a}
		switch {
		case a.Skip != "":
			r.Outcome, r.Detail = OutcomeSkipped, a.Why
			if a.Skip == SkipCooldown {
				// A block outlasts the cooldown and says more: report it rather than the cooldown.
				if why, reason := e.blockedRecord(ctx, a); why != "" {
					r.Skip, r.Detail, r.Reason = SkipBlocked, why, reason
				}
			}
		default:
			if b, ok := blocked[a.Target.WorkloadKey()]; ok {
				r.Outcome, r.Skip, r.Reason = OutcomeSkipped, SkipBlocked, b.Reason
				r.Detail = fmt.Sprintf("blocked: an earlier %s on %s ended %s (%s) in this run", b.Strategy, a.Target.WorkloadKey(), b.Outcome, b.Reason)
				break
			}
			if src := firstStopped(a.Sources, stopped); src != "" {
				r.Outcome, r.Detail, r.Skip = OutcomeSkipped, stopped[src], SkipEarlierFailure
				break
			}
			if skip, why, reason := e.preflight(ctx, a, dryRun); skip != "" {
				r.Outcome, r.Skip, r.Detail, r.Reason = OutcomeSkipped, skip, why, reason
				break
			}
			if dryRun {
				r.Outcome, r.Detail = OutcomePlanned, a.Why
				break
			}
			start := e.Now()
			r = e.one(ctx, a)
			r.Duration = e.Now().Sub(start)
			if r.Outcome == OutcomeFailed {
				for _, s := range a.Sources {
					stopped[s] = fmt.Sprintf("stopped: an earlier %s on %s failed (%s); not restarting more Envoys onto %s",
						a.Strategy, a.Target.WorkloadKey(), r.Detail, s)
				}
				if r.Reason != "" {
					blocked[a.Target.WorkloadKey()] = r
				}
			}
		}
		e.Log.Info("reload action", "strategy", string(r.Strategy), "envoy", r.Target.Envoy, "workload", r.Target.WorkloadKey(),
			"outcome", r.Outcome, "skip", r.Skip, "reason", r.Reason, "detail", r.Detail)
		if e.Metrics != nil {
			attempted := r.Outcome == OutcomeDone || r.Outcome == OutcomeRefused || r.Outcome == OutcomeFailed
			e.Metrics.ReloadAction(string(r.Strategy), r.Outcome, attempted, e.Now())
		}
		results = append(results, r)
	}
	return results
}

func (e *Executor) logger() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

func firstStopped(sources []string, stopped map[string]string) string {
	for _, s := range sources {
		if stopped[s] != "" {
			return s
		}
	}
	return ""
}

// one executes a single action with its deadline. Once the workload is disrupted (the eviction
// accepted, the template patched, the Envoy quit), its Lease says so (acting) until the outcome
// is known: done, or failed with a reason, a Warning Event and a block. An action interrupted
// from outside (shutdown, lost leadership) stays acting, for a later run to verify.
func (e *Executor) one(ctx context.Context, a Action) Result {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	r := Result{Action: a}
	var verify []string
	var err error
	acted := false
	switch a.Strategy {
	case Evict:
		verify, err = e.evict(ctx, a, &acted)
	case RolloutRestart:
		verify, err = e.rolloutRestart(ctx, a, &acted)
	case AdminQuit:
		verify, err = e.adminQuit(ctx, a, &acted)
	case Exec:
		err = RunCommand(ctx, e.Command, a.Target, e.Timeout)
		verify = []string{a.Target.Envoy}
	default:
		err = fmt.Errorf("unknown strategy %q", a.Strategy)
	}
	r.Replacements = slices.DeleteFunc(slices.Clone(verify), func(s string) bool { return s == a.Target.Envoy })
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		r.Outcome, r.Detail = OutcomeRefused, refused.Error()+"; nothing forced"
		return r
	case err != nil && acted:
		r.Outcome, r.Detail, r.Reason = OutcomeFailed, err.Error(), ReasonReplacementNotReady
		if parent.Err() != nil {
			r.Reason = ReasonUnverified
			return r // interrupted: the Lease stays "acting" for a later run to verify
		}
		e.finish(ctx, a, r, "CertdriftReloadUnverified")
		return r
	case err != nil:
		r.Outcome, r.Detail = OutcomeFailed, err.Error()
		return r
	}
	if e.Verify == nil {
		r.Outcome, r.Detail = OutcomeDone, "acted; no post-check configured"
		e.finish(ctx, a, r, "")
		return r
	}
	saw, err := e.postCheck(ctx, a, verify)
	if err != nil {
		r.Outcome, r.Detail, r.Reason = OutcomeFailed, "post-check: "+err.Error(), ReasonPostCheckFailed
		if parent.Err() != nil {
			r.Reason = ReasonUnverified
			return r
		}
		e.finish(ctx, a, r, "CertdriftReloadCheckFailed")
		return r
	}
	r.Outcome, r.Detail = OutcomeDone, saw
	e.finish(ctx, a, r, "")
	return r
}

// finish records the outcome of an action that disrupted a workload in its Lease and, when it
// failed, says so in a Warning Event. Local Envoys have no Lease: the Event is skipped too.
func (e *Executor) finish(ctx context.Context, a Action, r Result, warning string) {
	t := a.Target
	if warning != "" {
		msg := fmt.Sprintf("certdrift's %s of %s was not verified (%s): %s", a.Strategy, actionTarget(a), r.Reason, r.Detail)
		if !t.Workload.IsZero() {
			msg += "; no further reloads of " + t.Workload.Ref() + " until all its replicas are Ready and serve the desired certificate, or " +
				ClearHint(e.LeaseNamespace, t.Workload)
		}
		e.warnEvent(ctx, a, warning, msg)
	}
	if e.Client == nil || t.Workload.IsZero() {
		return
	}
	rec := Record{State: StateDone, Since: e.Now(), Strategy: a.Strategy, Target: actionTarget(a), Detail: r.Detail}
	if r.Outcome == OutcomeFailed {
		rec.State, rec.Reason = StateFailed, r.Reason
	}
	// The action's own deadline may be spent: the record still gets a few seconds.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := writeRecord(wctx, e.Client, e.LeaseNamespace, t.Workload, rec); err != nil {
		e.Log.Warn("reload outcome not recorded", "workload", t.WorkloadKey(), "outcome", rec.State, "err", err)
	}
}

func actionTarget(a Action) string {
	if a.Target.Pod != "" {
		return a.Target.Namespace + "/" + a.Target.Pod
	}
	if !a.Target.Workload.IsZero() {
		return a.Target.Workload.Namespace + "/" + a.Target.Workload.Ref()
	}
	return a.Target.Envoy
}

// postCheck retries the verifier until it passes or the action's deadline: a new Envoy needs a
// moment before its admin and listeners answer.
func (e *Executor) postCheck(ctx context.Context, a Action, envoys []string) (string, error) {
	for {
		saw, err := e.Verify(ctx, a, envoys)
		if err == nil {
			return saw, nil
		}
		if serr := sleepCtx(ctx, time.Second); serr != nil {
			return "", err
		}
	}
}

func (e *Executor) needClient(a Action) error {
	if e.Client == nil {
		return fmt.Errorf("%s of %s needs a Kubernetes client", a.Strategy, a.Target.Envoy)
	}
	return nil
}

// evict evicts one pod and waits for its replacement; it returns the replacements to check.
func (e *Executor) evict(ctx context.Context, a Action, acted *bool) ([]string, error) {
	if err := e.needClient(a); err != nil {
		return nil, err
	}
	t := a.Target
	p, err := e.Client.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read pod %s/%s: %w", t.Namespace, t.Pod, err)
	}
	if p.DeletionTimestamp != nil {
		return nil, fmt.Errorf("pod %s/%s is already terminating", t.Namespace, t.Pod)
	}
	sib, err := siblings(ctx, e.Client, p)
	if err != nil {
		return nil, err
	}
	before := map[types.UID]bool{}
	for _, q := range sib {
		before[q.UID] = true
	}
	tries, err := EvictPod(ctx, e.Client, t.Namespace, t.Pod, EvictOptions{UID: p.UID, RefusalWait: e.RefusalWait})
	var refused *RefusedError
	if errors.As(err, &refused) {
		e.event(ctx, podRef(p), true, "CertdriftEvictionRefused", fmt.Sprintf("certdrift did not reload this pod: %s", refused.Message))
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	*acted = true
	e.record(ctx, a)
	e.event(ctx, podRef(p), false, "CertdriftEvicted",
		fmt.Sprintf("certdrift evicted this pod (after %d tries) to reload its certificate: %s", tries, a.Why))
	return waitReplaced(ctx, e.Client, p, before)
}

// rolloutRestart restarts the workload and waits for the rollout; it returns the pods the
// workload has afterwards that it did not have before.
func (e *Executor) rolloutRestart(ctx context.Context, a Action, acted *bool) ([]string, error) {
	if err := e.needClient(a); err != nil {
		return nil, err
	}
	t := a.Target
	before, err := workloadPods(ctx, e.Client, t.Workload)
	if err != nil {
		return nil, err
	}
	old := map[types.UID]bool{}
	for _, p := range before {
		old[p.UID] = true
	}
	gen, err := restartWorkload(ctx, e.Client, t.Workload, e.Now())
	if err != nil {
		return nil, err
	}
	*acted = true
	e.record(ctx, a)
	e.event(ctx, t.Workload.objectRef(), false, "CertdriftRolloutRestart",
		fmt.Sprintf("certdrift restarted this workload to reload its certificate: %s", a.Why))
	if err := waitRollout(ctx, e.Client, t.Workload, gen); err != nil {
		return nil, err
	}
	after, err := workloadPods(ctx, e.Client, t.Workload)
	if err != nil {
		return nil, err
	}
	var fresh []string
	for _, p := range after {
		if !old[p.UID] && p.DeletionTimestamp == nil {
			fresh = append(fresh, p.Namespace+"/"+p.Name)
		}
	}
	if len(fresh) == 0 {
		return nil, fmt.Errorf("rollout of %s finished with no new pod", t.Workload)
	}
	return fresh, nil
}

// adminQuit drains and stops the Envoy; in Kubernetes it waits for the kubelet to restart the
// container and the pod to be Ready again.
func (e *Executor) adminQuit(ctx context.Context, a Action, acted *bool) ([]string, error) {
	t := a.Target
	base, hc, closeFn := t.AdminURL, e.AdminHTTP, func() {}
	var restarts int32
	var p *corev1.Pod
	if t.Pod != "" {
		if err := e.needClient(a); err != nil {
			return nil, err
		}
		var err error
		if p, err = e.Client.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("read pod %s/%s: %w", t.Namespace, t.Pod, err)
		}
		restarts = totalRestarts(p)
		if e.OpenAdmin != nil {
			if base, hc, closeFn, err = e.OpenAdmin(ctx, t.Namespace, t.Pod); err != nil {
				return nil, fmt.Errorf("open admin of %s: %w", t.Envoy, err)
			}
		}
	}
	err := AdminQuitEnvoy(ctx, hc, base, e.DrainWait)
	closeFn()
	if err != nil {
		return nil, err
	}
	if p != nil {
		*acted = true
		e.record(ctx, a)
		e.event(ctx, podRef(p), false, "CertdriftAdminQuit",
			fmt.Sprintf("certdrift asked this pod's Envoy to quit (/drain_listeners, /quitquitquit) to reload its certificate: %s", a.Why))
		if err := waitRestarted(ctx, e.Client, t.Namespace, t.Pod, restarts); err != nil {
			return nil, err
		}
	}
	return []string{t.Envoy}, nil
}

// record remembers that the action disrupted the workload (for the cooldown, and as "acting"
// until its outcome is known); failing to is logged, not fatal: the action happened, the report
// says so, and the Ready-replica check before the next action does not depend on it.
func (e *Executor) record(ctx context.Context, a Action) {
	t := a.Target
	if e.Client == nil || t.Workload.IsZero() {
		return
	}
	now := e.Now()
	rec := Record{At: now, State: StateActing, Since: now, Strategy: a.Strategy, Target: actionTarget(a)}
	if err := writeRecord(ctx, e.Client, e.LeaseNamespace, t.Workload, rec); err != nil {
		e.Log.Warn("reload cooldown not recorded", "workload", t.WorkloadKey(), "err", err)
	}
}

func (e *Executor) event(ctx context.Context, ref corev1.ObjectReference, warning bool, reason, msg string) {
	if e.Client == nil {
		return
	}
	if err := event(ctx, e.Client, ref, warning, reason, msg, e.Now()); err != nil {
		e.Log.Warn("reload event not recorded", "err", err)
	}
}

func (e *Executor) warnEvent(ctx context.Context, a Action, reason, msg string) {
	if a.Target.Pod == "" && a.Target.Workload.IsZero() {
		return
	}
	ref := a.Target.Workload.objectRef()
	if a.Target.Workload.IsZero() {
		ref = corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: a.Target.Namespace, Name: a.Target.Pod}
	}
	// The action's own context may be spent: the event still gets a few seconds.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	e.event(ctx, ref, true, reason, msg)
}
