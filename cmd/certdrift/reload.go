package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/exporter"
	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/remediate"
)

// exitReloadFailed is the exit code of an audit whose repair did not fully succeed: an action
// was refused (a PDB) or failed (including its post-check), or a workload is blocked by an
// earlier failed action. It outranks exit 1 so that scripts
// can tell "drift found" from "drift found and the repair did not work".
const exitReloadFailed = 3

// reloadFlags are `certdrift audit --reload`: repair what the audit proved stale. The audit
// fills in what it gathered (state) before judging; run acts on the judged report.
type reloadFlags struct {
	Reload     bool   `name:"reload" env:"CERTDRIFT_RELOAD" help:"Plan reloads of Envoys proven stale (dry run: prints the plan). See docs/repair.md."`
	Yes        bool   `name:"yes" env:"CERTDRIFT_YES" help:"With --reload: carry the plan out."`
	ReloadExec string `name:"reload-exec" env:"CERTDRIFT_RELOAD_EXEC" help:"exec strategy: command run per Envoy, split on spaces, no shell; {envoy} and {admin} are replaced."`
	// The repair policy, shared with serve --remediate (remediate.Policy): --reload-strategy,
	// --reload-budget, --reload-cooldown, --reload-timeout, --reload-refusal-wait,
	// --reload-drain-wait, --reload-lease-namespace.
	//lint:ignore SA5008 kong reads every set: entry of a tag (one kong variable each), not only the first
	Repair remediate.Policy `embed:"" prefix:"reload-" set:"reload_budget=5" set:"reload_per=run" set:"reload_strategies=,evict,rollout-restart,admin-quit,exec" set:"reload_lease_default=, else certdrift"`

	state *reloadState `kong:"-"`
}

// reloadState is what the audit gathered, for planning and for the post-check.
type reloadState struct {
	in     audit.Inputs
	policy config.Policy
	// Kubernetes mode: rc is set; local mode: cfg.
	rc *rest.Config
	// session is the audit's own Kubernetes session, kept open with --yes for the post-checks.
	session *gather.Session
	cfg     *config.Config
	gopts   gather.Options
}

func (r *reloadFlags) validate() error {
	switch {
	case r.Yes && !r.Reload:
		return errors.New("--yes needs --reload")
	case r.Repair.Strategy == string(remediate.Exec) && strings.TrimSpace(r.ReloadExec) == "":
		return errors.New("--reload-strategy exec needs --reload-exec")
	}
	return r.Repair.Validate(remediate.CommandAudit)
}

// reload is the audit's hook: with --reload, plan from the judged report, and act with --yes.
// Both modes left what they gathered in r.state.
func (c *auditCmd) reload(ctx context.Context, io *streams, log *slog.Logger, report audit.Report) error {
	if !c.Reload {
		return nil
	}
	return c.reloadFlags.run(ctx, io, log, c.Output, report)
}

// gatherKube is GatherKube for the audit: with --reload it keeps the round's inputs and policy
// (the --config file's, flags applied) for the repair, and with --yes the session too, so that
// post-checks and admin-quit reuse its informers instead of listing every Secret again.
func (c *auditCmd) gatherKube(ctx context.Context, rc *rest.Config, policy config.Policy, opts gather.KubeOptions) (audit.Inputs, error) {
	if !c.Reload {
		return gather.KubeOnce(ctx, rc, policy, opts)
	}
	s, err := gather.Start(ctx, rc, policy, opts)
	if err != nil {
		return audit.Inputs{}, err
	}
	in := s.Gather(ctx, gather.Fleet)
	if !c.Yes {
		// A dry run observes nothing more.
		s.Close()
		s = nil
	}
	c.reloadFlags.state = &reloadState{in: in, policy: policy, rc: rc, session: s}
	return in, nil
}

// closeReload ends what gatherKube kept open.
func (r *reloadFlags) closeReload() {
	if r.state != nil && r.state.session != nil {
		r.state.session.Close()
		r.state.session = nil
	}
}

// run plans (and with --yes executes) reloads from the judged report and prints the outcome.
// It returns an exit error when an action was refused or failed.
func (r *reloadFlags) run(ctx context.Context, io *streams, log *slog.Logger, output string, report audit.Report) error {
	if !r.Reload || r.state == nil {
		return nil
	}
	st := r.state
	kubeMode := st.rc != nil
	opt := r.Repair.Options(kubeMode, time.Now())
	exe := &remediate.Executor{Log: log, Command: strings.Fields(r.ReloadExec),
		// Counted like serve --remediate does; a one-shot audit has no /metrics to expose them on.
		Metrics: exporter.NewRepairMetrics()}
	r.Repair.Configure(exe)
	in := st.in
	if kubeMode {
		client, err := kubeapi.NewForConfig(st.rc)
		if err != nil {
			return noRun(fmt.Errorf("reload: kubernetes client: %w", err))
		}
		exe.Client = client
		if in, err = remediate.PrepareKube(ctx, client, exe.LeaseNamespace, report, st.in, &opt); err != nil {
			return noRun(fmt.Errorf("reload: %w", err))
		}
		if r.Yes {
			exe.Verify = remediate.NewVerifier(st.session.GatherEnvoys, st.policy, time.Now)
			exe.OpenAdmin = st.session.OpenAdminURL
			// A workload blocked by an earlier failed action is released once the audit shows
			// it healthy again.
			exe.RecoverBlocked(ctx, remediate.HealthyWorkloads(report))
		}
	} else {
		exe.Verify = remediate.NewVerifier(st.observeLocal, st.policy, time.Now)
	}
	actions := remediate.Plan(report, in, opt)
	results := exe.Run(ctx, actions, !r.Yes)

	render := func() error { return remediate.RenderTable(io.Out, !r.Yes, results) }
	if output == "json" {
		render = func() error { return remediate.RenderJSON(io.Out, !r.Yes, results, report) }
	}
	if err := render(); err != nil {
		return noRun(err)
	}
	bad := remediate.Failed(results)
	if bad > 0 {
		return &exitError{code: exitReloadFailed, silent: true, err: fmt.Errorf("%d reload actions refused, failed or blocked", bad)}
	}
	return nil
}

// observeLocal gathers the named local Envoys again, for the post-check.
func (st *reloadState) observeLocal(ctx context.Context, envoys []string) audit.Inputs {
	cfg := *st.cfg
	cfg.Envoys = slices.DeleteFunc(slices.Clone(cfg.Envoys), func(e config.Envoy) bool { return !slices.Contains(envoys, e.Name) })
	return gather.Local(ctx, &cfg, gather.Fleet, st.gopts)
}
