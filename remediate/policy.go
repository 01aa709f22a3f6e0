package remediate

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Policy is how certdrift repairs, the same for `audit --reload` and `serve --remediate`: both
// commands embed it with the flag prefix "reload-" (--reload-strategy, --reload-budget, …,
// environment CERTDRIFT_RELOAD_*), and it is validated here for both. The commands differ only
// in defaults and limits, which they set through kong variables on the embedding
// (reload_budget, reload_per, reload_strategies) and through Command.
//
// serve --remediate named these flags --remediate-strategy, --remediate-budget, … (environment
// CERTDRIFT_REMEDIATE_*) before they were one; the old names remain as hidden aliases so that
// existing manifests keep working.
type Policy struct {
	Strategy       string        `name:"strategy" default:"" enum:"${reload_strategies}" aliases:"remediate-strategy" env:"CERTDRIFT_RELOAD_STRATEGY,CERTDRIFT_REMEDIATE_STRATEGY" help:"Strategy for pods without a certdrift.dev/reload-strategy annotation (Kubernetes default: evict; rollout-restart for STALE_PROCESS) ($$${env})."`
	Budget         int           `name:"budget" default:"${reload_budget}" aliases:"remediate-budget" env:"CERTDRIFT_RELOAD_BUDGET,CERTDRIFT_REMEDIATE_BUDGET" help:"Most reload actions per ${reload_per} ($$${env})."`
	Cooldown       time.Duration `name:"cooldown" default:"10m" aliases:"remediate-cooldown" env:"CERTDRIFT_RELOAD_COOLDOWN,CERTDRIFT_REMEDIATE_COOLDOWN" help:"Least time between two reloads of one workload (remembered in a Lease per workload) ($$${env})."`
	Timeout        time.Duration `name:"timeout" default:"3m" aliases:"remediate-timeout" env:"CERTDRIFT_RELOAD_TIMEOUT,CERTDRIFT_REMEDIATE_TIMEOUT" help:"Deadline of one action: eviction or restart, wait for the replacement, post-check ($$${env})."`
	RefusalWait    time.Duration `name:"refusal-wait" default:"30s" aliases:"remediate-refusal-wait" env:"CERTDRIFT_RELOAD_REFUSAL_WAIT,CERTDRIFT_REMEDIATE_REFUSAL_WAIT" help:"How long a refused eviction (PodDisruptionBudget) is retried, honouring Retry-After, before it is reported as refused ($$${env})."`
	DrainWait      time.Duration `name:"drain-wait" default:"5s" aliases:"remediate-drain-wait" env:"CERTDRIFT_RELOAD_DRAIN_WAIT,CERTDRIFT_REMEDIATE_DRAIN_WAIT" help:"admin-quit: pause between /drain_listeners?graceful and /quitquitquit ($$${env})."`
	LeaseNamespace string        `name:"lease-namespace" aliases:"remediate-lease-namespace" env:"CERTDRIFT_RELOAD_LEASE_NAMESPACE,CERTDRIFT_REMEDIATE_LEASE_NAMESPACE" help:"Kubernetes mode: certdrift's own namespace, where each workload's reload record Lease (cooldown, last outcome) and serve's election Lease live; give audit and serve the same (default: $$POD_NAMESPACE${reload_lease_default}) ($$${env})."`
}

// Command is the command a Policy serves: defaults and limits differ between them.
type Command string

const (
	// CommandAudit is `audit --reload`: one run, from a laptop or a Job.
	CommandAudit Command = "audit --reload"
	// CommandServe is `serve --remediate`: every round, in the cluster.
	CommandServe Command = "serve --remediate"
)

// DefaultLeaseNamespace is where `audit --reload` keeps its records outside a pod: the
// namespace the kustomize base installs certdrift into, and the one docs/operate.md installs
// the chart in.
const DefaultLeaseNamespace = "certdrift"

// Validate checks the policy for cmd and fills in the lease namespace: the flag, else
// $POD_NAMESPACE (certdrift in a pod, or an audit run as a Job), else for audit
// DefaultLeaseNamespace; serve, which also elects its leader there, requires one.
func (p *Policy) Validate(cmd Command) error {
	switch {
	case p.Budget < 0:
		return fmt.Errorf("--reload-budget %d: must not be negative", p.Budget)
	case p.Cooldown < 0 || p.RefusalWait < 0 || p.DrainWait < 0:
		return errors.New("--reload-cooldown, --reload-refusal-wait and --reload-drain-wait must not be negative")
	case p.Timeout <= 0:
		return fmt.Errorf("--reload-timeout %s: must be positive", p.Timeout)
	case p.LeaseNamespace != "" && len(validation.IsDNS1123Label(p.LeaseNamespace)) > 0:
		return fmt.Errorf("--reload-lease-namespace %q: not a namespace name", p.LeaseNamespace)
	case cmd == CommandServe && p.Strategy == string(Exec):
		return errors.New("--reload-strategy exec runs a local command for an Envoy outside Kubernetes: only audit --reload has it")
	}
	if p.LeaseNamespace == "" {
		p.LeaseNamespace = os.Getenv("POD_NAMESPACE")
	}
	if p.LeaseNamespace == "" {
		if cmd == CommandServe {
			return errors.New("--remediate needs --reload-lease-namespace (or POD_NAMESPACE) for its election and reload record Leases")
		}
		p.LeaseNamespace = DefaultLeaseNamespace
	}
	return nil
}

// Options are the planner's options of this policy for one run or round at now.
func (p Policy) Options(kubernetes bool, now time.Time) Options {
	return Options{Kubernetes: kubernetes, Strategy: Strategy(p.Strategy), Budget: p.Budget, Cooldown: p.Cooldown, Now: now}
}

// Configure sets the executor's deadlines and certdrift's namespace from the policy.
func (p Policy) Configure(e *Executor) {
	e.Timeout, e.RefusalWait, e.DrainWait, e.LeaseNamespace = p.Timeout, p.RefusalWait, p.DrainWait, p.LeaseNamespace
}
