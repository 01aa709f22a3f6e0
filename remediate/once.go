package remediate

import (
	"context"
	"log/slog"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/kubeapi"
)

// OnceConfig is one judged round's repair: `audit --reload`'s, and each round of
// `serve --remediate`'s (Remediator).
type OnceConfig struct {
	// Client is the cluster's; nil outside Kubernetes.
	Client *kubeapi.Client
	Policy Policy
	// Command is the exec strategy's argv ({envoy} and {admin} replaced).
	Command []string
	// DryRun plans (and counts, outcome planned) but changes nothing.
	DryRun bool
	// Observe is the post-check's second look at the acted-on Envoys, judged with AuditPolicy;
	// OpenAdmin is admin-quit's route to a pod (nil: the target's admin URL). Used unless DryRun.
	Observe     Observer
	OpenAdmin   AdminOpener
	AuditPolicy config.Policy
	// Recover releases, before acting in Kubernetes mode, the blocked workloads the report
	// shows healthy again; nil releases every one of HealthyWorkloads.
	Recover func(ctx context.Context, exe *Executor, report audit.Report)
	Metrics Recorder
	Log     *slog.Logger
}

// Once plans the reloads the judged report proves needed and, unless DryRun, carries them out
// one at a time, each post-checked. In Kubernetes mode the stale pods' annotations and their
// workloads' reload records are read first (PrepareKube); an error there is the only error.
func Once(ctx context.Context, c OnceConfig, report audit.Report, in audit.Inputs) ([]Result, error) {
	kube := c.Client != nil
	opt := c.Policy.Options(kube, time.Now())
	exe := &Executor{Client: c.Client, Log: c.Log, Command: c.Command, Metrics: c.Metrics}
	c.Policy.Configure(exe)
	if kube {
		var err error
		if in, err = PrepareKube(ctx, c.Client, exe.LeaseNamespace, report, in, &opt); err != nil {
			return nil, err
		}
	}
	if !c.DryRun {
		exe.Verify = NewVerifier(c.Observe, c.AuditPolicy, time.Now)
		exe.OpenAdmin = c.OpenAdmin
		switch {
		case kube && c.Recover != nil:
			c.Recover(ctx, exe, report)
		case kube:
			// A workload blocked by an earlier failed action is released once the audit shows
			// it healthy again.
			exe.RecoverBlocked(ctx, HealthyWorkloads(report))
		}
	}
	return exe.Run(ctx, Plan(report, in, opt), c.DryRun), nil
}
