package remediate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/certdrift/certdrift/audit"
)

// Strategy is how one stale Envoy is made to load its certificate again.
type Strategy string

const (
	// Evict uses the policy/v1 Eviction API on the stale pod, so PodDisruptionBudgets decide.
	Evict Strategy = "evict"
	// RolloutRestart patches the owner's pod template, as `kubectl rollout restart` does.
	RolloutRestart Strategy = "rollout-restart"
	// AdminQuit drains the listeners and asks Envoy to exit; a supervisor must restart it.
	AdminQuit Strategy = "admin-quit"
	// Exec runs a configured command (Envoy outside Kubernetes).
	Exec Strategy = "exec"
)

// Strategies lists the valid strategies.
var Strategies = []Strategy{Evict, RolloutRestart, AdminQuit, Exec}

// ParseStrategy reads a strategy name, as in the certdrift.dev/reload-strategy annotation.
func ParseStrategy(s string) (Strategy, error) {
	for _, v := range Strategies {
		if string(v) == strings.TrimSpace(s) {
			return v, nil
		}
	}
	return "", fmt.Errorf("reload strategy %q: want one of evict, rollout-restart, admin-quit, exec", s)
}

// StrategyAnnotation on a pod (or its template) chooses the strategy for that workload.
const StrategyAnnotation = "certdrift.dev/reload-strategy"

// Skip reasons: a closed set, so they can label metrics and scripts can branch on them.
const (
	SkipBudget      = "budget"       // the run's budget of actions is spent
	SkipCooldown    = "cooldown"     // the workload was acted on within the cooldown
	SkipBadSecret   = "bad_secret"   // the desired certificate itself is broken: a restart cannot help
	SkipNoStrategy  = "no_strategy"  // no strategy applies (local Envoy without one configured)
	SkipUnsupported = "unsupported"  // the strategy cannot act on this target (e.g. evict a bare pod)
	SkipBadConfig   = "bad_strategy" // the strategy annotation is not a strategy
	// SkipBlocked: an earlier action on the workload failed or was never verified (recorded in
	// its reload Lease); nothing more is done until it is healthy again or a person clears it.
	SkipBlocked = "blocked"
	// SkipReplacementNotReady: an earlier action's replacement is not yet Ready and verified.
	SkipReplacementNotReady = "replacement_not_ready"
	// SkipTooFewReady: acting would take the workload's Ready replicas below replicas − 1 (or
	// below its PodDisruptionBudget).
	SkipTooFewReady = "too_few_ready"
	// SkipEarlierFailure: an earlier action of this run onto the same desired certificate failed.
	SkipEarlierFailure = "earlier_failure"
	// SkipCannotCheck: the checks before the action could not read the workload's record or
	// replicas; certdrift does not act blind.
	SkipCannotCheck = "cannot_check"
)

// SkipReasons lists every skip reason.
var SkipReasons = []string{SkipBudget, SkipCooldown, SkipBadSecret, SkipNoStrategy, SkipUnsupported, SkipBadConfig,
	SkipBlocked, SkipReplacementNotReady, SkipTooFewReady, SkipEarlierFailure, SkipCannotCheck}

// Target is one stale Envoy, or one workload for a rollout restart.
type Target struct {
	// Envoy is "namespace/pod" in Kubernetes mode, else the configured name. Empty for a
	// workload-wide action.
	Envoy     string `json:"envoy,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	// Workload is the pod's owner (printed "Deployment/web"); zero for a bare pod or a local
	// Envoy.
	Workload Workload `json:"workload,omitzero"`
	// AdminURL is the Envoy admin as the audit reached it (local mode; Kubernetes mode reopens
	// it through the admin dialer).
	AdminURL string `json:"admin_url,omitempty"`
}

// WorkloadKey names the workload a cooldown and the one-pod-at-a-time rule apply to:
// "namespace/Kind/name", the Envoy itself when it has no workload.
func (t Target) WorkloadKey() string {
	if !t.Workload.IsZero() {
		return t.Workload.String()
	}
	return t.Envoy
}

// Action is one planned repair. Skip is set when the planner decided not to act, with Why
// saying so in words.
type Action struct {
	Strategy Strategy `json:"strategy,omitempty"`
	Target   Target   `json:"target"`
	// Pods are the stale pods a workload-wide action (rollout-restart) replaces, for the
	// post-check; for a per-pod action it is the pod itself.
	Pods []string `json:"pods,omitempty"`
	// Codes are the findings that prove the drift; Sources the desired sources they are about.
	Codes   []audit.Code `json:"codes"`
	Sources []string     `json:"sources,omitempty"`
	Skip    string       `json:"skip,omitempty"`
	Why     string       `json:"why"`
}

// Options steer planning. Everything Plan needs from the cluster (annotations, last actions) is
// read by the caller beforehand, so Plan stays a pure function.
type Options struct {
	// Kubernetes selects the defaults of Kubernetes mode: evict, rollout-restart for
	// STALE_PROCESS. Outside Kubernetes there is no default: Strategy must be set.
	Kubernetes bool
	// Strategy overrides the default for every target without an annotation.
	Strategy Strategy
	// Annotated is the strategy annotation of each pod ("namespace/pod" → value), as read.
	Annotated map[string]string
	// Budget is the most actions in this run; 0 means none.
	Budget int
	// Cooldown is the least time between two actions on one workload; LastAction holds when
	// each workload (Target.WorkloadKey) was last acted on.
	Cooldown   time.Duration
	LastAction map[string]time.Time
	Now        time.Time
}

// Plan chooses actions from a judged report: one per stale pod (evict, admin-quit, exec) or per
// stale workload (rollout-restart), in a stable order, with the guards applied. Pods without a
// drift finding never appear: a pod that converged on its own is left alone. Skipped actions are
// returned too, so the preview says why nothing happened.
func Plan(report audit.Report, in audit.Inputs, opt Options) []Action {
	pods := map[string]*audit.EnvoyView{}
	for i := range in.Envoys {
		pods[in.Envoys[i].Config.Name] = &in.Envoys[i]
	}
	bad := badSources(report)

	// Group drift findings by Envoy, in the report's order.
	type stale struct {
		codes   []audit.Code
		sources []string
	}
	byEnvoy := map[string]*stale{}
	var order []string
	for _, f := range report.Findings {
		if !IsDrift(f.Code) || f.Subject.Envoy == "" {
			// A REPLICA_DIVERGENCE that names no pod is acted on through its stale replicas'
			// own findings, never by restarting the whole workload.
			continue
		}
		s := byEnvoy[f.Subject.Envoy]
		if s == nil {
			s = &stale{}
			byEnvoy[f.Subject.Envoy] = s
			order = append(order, f.Subject.Envoy)
		}
		if !slices.Contains(s.codes, f.Code) {
			s.codes = append(s.codes, f.Code)
		}
		if f.Subject.Source != "" && !slices.Contains(s.sources, f.Subject.Source) {
			s.sources = append(s.sources, f.Subject.Source)
		}
	}
	slices.Sort(order)

	var actions []Action
	restarts := map[string]int{} // workload key → index of its rollout-restart action
	for _, envoy := range order {
		s := byEnvoy[envoy]
		t := Target{Envoy: envoy}
		if ev := pods[envoy]; ev != nil {
			if p := ev.Pod; p != nil {
				// The owner discovery resolved for the audit: not read again here. The admin is
				// reopened through the admin dialer when acting (Executor.OpenAdmin).
				t.Namespace, t.Pod, t.Workload = p.Namespace, p.Pod, ParseWorkload(p.Namespace, p.Workload)
			} else {
				t.AdminURL = ev.Config.Admin
			}
		}
		if t.Pod == "" && opt.Kubernetes {
			t.Namespace, t.Pod, _ = strings.Cut(envoy, "/")
		}
		slices.Sort(s.codes)
		slices.Sort(s.sources)
		a := Action{Target: t, Codes: s.codes, Sources: s.sources}
		if t.Pod != "" {
			a.Pods = []string{t.Namespace + "/" + t.Pod}
		}
		st, skip, why := chooseStrategy(t, s.codes, opt)
		a.Strategy = st
		if skip != "" {
			a.Skip, a.Why = skip, why
			actions = append(actions, a)
			continue
		}
		if src := firstBad(s.sources, bad); src != "" {
			a.Skip = SkipBadSecret
			a.Why = fmt.Sprintf("desired certificate %s is itself broken (%s): restarting would not load it; fix the Secret first",
				src, strings.Join(bad[src], ", "))
			actions = append(actions, a)
			continue
		}
		a.Why = fmt.Sprintf("%s stale (%s) beyond the grace period", describe(t), joinCodes(s.codes))
		if st == RolloutRestart {
			key := t.WorkloadKey()
			if i, ok := restarts[key]; ok {
				// One restart replaces every pod of the workload: fold this pod into it.
				actions[i].Pods = append(actions[i].Pods, a.Pods...)
				actions[i].Codes = union(actions[i].Codes, a.Codes)
				actions[i].Sources = union(actions[i].Sources, a.Sources)
				continue
			}
			restarts[key] = len(actions)
			a.Target.Envoy, a.Target.Pod, a.Target.AdminURL = "", "", ""
			a.Why = fmt.Sprintf("%s has stale pods (%s): restart its rollout", t.Workload, joinCodes(s.codes))
		}
		actions = append(actions, a)
	}
	applyGuards(actions, opt)
	return actions
}

// applyGuards marks actions beyond the budget or within a workload's cooldown as skipped.
func applyGuards(actions []Action, opt Options) {
	used := 0
	for i := range actions {
		a := &actions[i]
		if a.Skip != "" {
			continue
		}
		key := a.Target.WorkloadKey()
		if last, ok := opt.LastAction[key]; ok && opt.Cooldown > 0 && opt.Now.Sub(last) < opt.Cooldown {
			a.Skip = SkipCooldown
			a.Why = fmt.Sprintf("%s was reloaded %s ago, within the cooldown of %s", key,
				opt.Now.Sub(last).Round(time.Second), opt.Cooldown)
			continue
		}
		if used >= opt.Budget {
			a.Skip = SkipBudget
			a.Why = fmt.Sprintf("budget of %d actions per run spent", opt.Budget)
			continue
		}
		used++
	}
}

// chooseStrategy picks a target's strategy: its annotation, else the flag, else the mode's
// default (rollout-restart for STALE_PROCESS in Kubernetes, since such a component never
// reloads and every replica is stale; evict otherwise).
func chooseStrategy(t Target, codes []audit.Code, opt Options) (Strategy, string, string) {
	var st Strategy
	if v, ok := opt.Annotated[t.Envoy]; ok && v != "" {
		s, err := ParseStrategy(v)
		if err != nil {
			return "", SkipBadConfig, fmt.Sprintf("pod annotation %s: %v", StrategyAnnotation, err)
		}
		st = s
	}
	switch {
	case st != "":
	case opt.Strategy != "":
		st = opt.Strategy
	case !opt.Kubernetes:
		return "", SkipNoStrategy, "no reload strategy for an Envoy outside Kubernetes: set --reload-strategy admin-quit or exec"
	case slices.Contains(codes, audit.StaleProcess):
		st = RolloutRestart
	default:
		st = Evict
	}
	switch {
	case (st == Evict || st == RolloutRestart) && t.Pod == "":
		return st, SkipUnsupported, fmt.Sprintf("%s needs a Kubernetes pod; %s is not one", st, t.Envoy)
	case st == Evict && t.Workload.IsZero():
		return st, SkipUnsupported, fmt.Sprintf("%s is a bare pod: nothing would replace it after an eviction", t.Envoy)
	case st == RolloutRestart && !t.Workload.restartable():
		return st, SkipUnsupported, fmt.Sprintf("%s is owned by %q, not a Deployment, DaemonSet or StatefulSet", t.Envoy, t.Workload.Ref())
	case st == Exec && opt.Kubernetes:
		return st, SkipUnsupported, "exec runs a local command: only for Envoys outside Kubernetes"
	case st == AdminQuit && t.AdminURL == "" && t.Pod == "":
		return st, SkipUnsupported, fmt.Sprintf("%s has no admin URL to send /quitquitquit to", t.Envoy)
	}
	return st, "", ""
}

// badSources maps each desired source whose certificate is broken to the codes that say so.
func badSources(r audit.Report) map[string][]string {
	out := map[string][]string{}
	for _, f := range r.Findings {
		if !badSecretCodes[f.Code] || f.Subject.Source == "" {
			continue
		}
		if c := string(f.Code); !slices.Contains(out[f.Subject.Source], c) {
			out[f.Subject.Source] = append(out[f.Subject.Source], c)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

func firstBad(sources []string, bad map[string][]string) string {
	for _, s := range sources {
		if len(bad[s]) > 0 {
			return s
		}
	}
	return ""
}

func describe(t Target) string {
	if !t.Workload.IsZero() {
		return fmt.Sprintf("%s (%s)", t.Envoy, t.Workload.Ref())
	}
	return t.Envoy
}

func joinCodes(cs []audit.Code) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

func union[T cmp.Ordered](a, b []T) []T {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}
