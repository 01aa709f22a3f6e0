package main

import (
	"errors"
	"log/slog"
	"strings"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/exporter"
	"github.com/certdrift/certdrift/oneshot"
	"github.com/certdrift/certdrift/remediate"
)

// exitReloadFailed is the exit code of an audit whose repair did not fully succeed: an action
// was refused (a PDB) or failed (including its post-check), or a workload is blocked by an
// earlier failed action. It outranks exit 1 so that scripts
// can tell "drift found" from "drift found and the repair did not work".
const exitReloadFailed = 3

// reloadFlags are `certdrift audit --reload`: repair what the audit proved stale (oneshot's
// Round.Repair). The audit keeps its round (state) until the command ends.
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

// reloadState is the audit's round, which the repair plans from and post-checks through.
type reloadState struct {
	round  *oneshot.Round
	policy config.Policy // the round's, which the post-checks judge with
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

// closeReload ends the session the audit's round kept for --reload --yes.
func (r *reloadFlags) closeReload() {
	if r.state != nil {
		r.state.round.Close()
	}
}

// repair is the audit's repair with --reload (nil without): plan, and with --yes act.
func (r *reloadFlags) repair(log *slog.Logger) *oneshot.Repair {
	if !r.Reload {
		return nil
	}
	return &oneshot.Repair{Policy: r.Repair, Command: strings.Fields(r.ReloadExec), DryRun: !r.Yes,
		// Counted like serve --remediate does; a one-shot audit has no /metrics to expose them on.
		Metrics: exporter.NewRepairMetrics(), Log: log}
}
