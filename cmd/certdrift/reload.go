package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/remediate"
)

// exitReloadFailed is the exit code of an audit whose repair did not fully succeed: an action
// was refused (a PDB) or failed (including its post-check), or a workload is blocked by an
// earlier failed action. It outranks exit 1 so that scripts
// can tell "drift found" from "drift found and the repair did not work".
const exitReloadFailed = 3

// reloadFlags are `certdrift audit --reload`: repair what the audit proved stale. The audit
// fills in what it gathered (use) before judging; run acts on the judged report.
type reloadFlags struct {
	Reload            bool          `name:"reload" env:"CERTDRIFT_RELOAD" help:"Plan reloads of Envoys proven stale (dry run: prints the plan). See docs/repair.md."`
	Yes               bool          `name:"yes" env:"CERTDRIFT_YES" help:"With --reload: carry the plan out."`
	ReloadStrategy    string        `name:"reload-strategy" default:"" enum:",evict,rollout-restart,admin-quit,exec" env:"CERTDRIFT_RELOAD_STRATEGY" help:"Strategy for targets without a certdrift.dev/reload-strategy annotation (Kubernetes default: evict; rollout-restart for STALE_PROCESS)."`
	ReloadBudget      int           `name:"reload-budget" default:"5" env:"CERTDRIFT_RELOAD_BUDGET" help:"Most reload actions per run."`
	ReloadCooldown    time.Duration `name:"reload-cooldown" default:"10m" env:"CERTDRIFT_RELOAD_COOLDOWN" help:"Least time between two reloads of one workload (remembered in a Lease per workload)."`
	ReloadTimeout     time.Duration `name:"reload-timeout" default:"3m" env:"CERTDRIFT_RELOAD_TIMEOUT" help:"Deadline of one action: eviction or restart, wait for the replacement, post-check."`
	ReloadRefusalWait time.Duration `name:"reload-refusal-wait" default:"30s" env:"CERTDRIFT_RELOAD_REFUSAL_WAIT" help:"How long a refused eviction (PodDisruptionBudget) is retried, honouring Retry-After, before it is reported as refused."`
	ReloadDrainWait   time.Duration `name:"reload-drain-wait" default:"5s" env:"CERTDRIFT_RELOAD_DRAIN_WAIT" help:"admin-quit: pause between /drain_listeners?graceful and /quitquitquit."`
	ReloadExec        string        `name:"reload-exec" env:"CERTDRIFT_RELOAD_EXEC" help:"exec strategy: command run per Envoy, split on spaces, no shell; {envoy} and {admin} are replaced."`
	// One namespace holds all of certdrift's Leases, whoever acts: an audit run from a laptop
	// and serve --remediate in the cluster must share it to share cooldowns and blocks.
	ReloadLeaseNamespace string `name:"reload-lease-namespace" env:"CERTDRIFT_RELOAD_LEASE_NAMESPACE" help:"Kubernetes mode: certdrift's own namespace, where each workload's reload record Lease (cooldown, last outcome) lives; the same as serve --remediate-lease-namespace (default: $POD_NAMESPACE, else certdrift)."`

	state *reloadState `kong:"-"`
}

// defaultLeaseNamespace is where `audit --reload` keeps its records outside a pod: the namespace
// the kustomize base installs certdrift into, and the one docs/operate.md installs the chart in.
const defaultLeaseNamespace = "certdrift"

// leaseNamespace is the flag's value, else $POD_NAMESPACE (an audit run as a Job), else certdrift.
func (r *reloadFlags) leaseNamespace() string {
	if r.ReloadLeaseNamespace != "" {
		return r.ReloadLeaseNamespace
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return defaultLeaseNamespace
}

// reloadState is what the audit gathered, for planning and for the post-check.
type reloadState struct {
	in     audit.Inputs
	policy config.Policy
	// Kubernetes mode: rc is set; local mode: cfg.
	rc *rest.Config
	// session is the audit's own Kubernetes session, kept open with --yes for the post-checks.
	session *KubeSession
	cfg     *config.Config
	gopts   GatherOptions
}

func (r *reloadFlags) validate() error {
	switch {
	case r.Yes && !r.Reload:
		return errors.New("--yes needs --reload")
	case r.ReloadBudget < 0:
		return fmt.Errorf("--reload-budget %d: must not be negative", r.ReloadBudget)
	case r.ReloadCooldown < 0 || r.ReloadTimeout <= 0 || r.ReloadRefusalWait < 0 || r.ReloadDrainWait < 0:
		return errors.New("--reload-cooldown, --reload-refusal-wait and --reload-drain-wait must not be negative, --reload-timeout must be positive")
	case r.ReloadStrategy == "exec" && strings.TrimSpace(r.ReloadExec) == "":
		return errors.New("--reload-strategy exec needs --reload-exec")
	case r.ReloadLeaseNamespace != "" && len(validation.IsDNS1123Label(r.ReloadLeaseNamespace)) > 0:
		return fmt.Errorf("--reload-lease-namespace %q: not a namespace name", r.ReloadLeaseNamespace)
	}
	return nil
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
func (c *auditCmd) gatherKube(ctx context.Context, rc *rest.Config, policy config.Policy, opts KubeOptions) (audit.Inputs, error) {
	if !c.Reload {
		return GatherKube(ctx, rc, policy, opts)
	}
	s, err := StartKube(ctx, rc, policy, opts)
	if err != nil {
		return audit.Inputs{}, err
	}
	in := s.Gather(ctx)
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

// reloadReport is what -o json prints with --reload: the audit report with the reload results
// beside its fields, one JSON document.
type reloadReport struct {
	audit.Report
	Reload reloadSection `json:"reload"`
}

type reloadSection struct {
	DryRun  bool               `json:"dry_run"`
	Results []remediate.Result `json:"results"`
}

// run plans (and with --yes executes) reloads from the judged report and prints the outcome.
// It returns an exit error when an action was refused or failed.
func (r *reloadFlags) run(ctx context.Context, io *streams, log *slog.Logger, output string, report audit.Report) error {
	if !r.Reload || r.state == nil {
		return nil
	}
	st := r.state
	kubeMode := st.rc != nil
	opt := remediate.Options{Kubernetes: kubeMode, Strategy: remediate.Strategy(r.ReloadStrategy),
		Budget: r.ReloadBudget, Cooldown: r.ReloadCooldown, Now: time.Now()}
	exe := &remediate.Executor{Log: log, Timeout: r.ReloadTimeout, RefusalWait: r.ReloadRefusalWait,
		DrainWait: r.ReloadDrainWait, Command: strings.Fields(r.ReloadExec),
		// Counted like serve --remediate does; a one-shot audit has no /metrics to expose them on.
		Metrics: newRepairMetrics()}
	if kubeMode {
		k, err := newKubeReload(ctx, st, r.leaseNamespace(), log)
		if err != nil {
			return noRun(fmt.Errorf("reload: %w", err))
		}
		exe.LeaseNamespace = k.leaseNS
		if err := k.prepare(ctx, report, &opt); err != nil {
			return noRun(fmt.Errorf("reload: %w", err))
		}
		exe.Client = k.client
		if r.Yes {
			exe.Verify, exe.OpenAdmin = k.verify, k.openAdmin
			// A workload blocked by an earlier failed action is released once the audit shows
			// it healthy again.
			exe.RecoverBlocked(ctx, remediate.HealthyWorkloads(report))
		}
	} else {
		exe.Verify = st.verifyLocal
	}
	actions := remediate.Plan(report, st.in, opt)
	results := exe.Run(ctx, actions, !r.Yes)

	if err := renderReload(io.Out, output, !r.Yes, results, report); err != nil {
		return noRun(err)
	}
	var bad int
	for _, res := range results {
		if res.Outcome == remediate.OutcomeFailed || res.Outcome == remediate.OutcomeRefused || res.Skip == remediate.SkipBlocked {
			bad++
		}
	}
	if bad > 0 {
		return &exitError{code: exitReloadFailed, silent: true, err: fmt.Errorf("%d reload actions refused, failed or blocked", bad)}
	}
	return nil
}

func renderReload(w io.Writer, output string, dryRun bool, results []remediate.Result, report audit.Report) error {
	if output == "json" {
		s := reloadReport{Report: report, Reload: reloadSection{DryRun: dryRun, Results: results}}
		if s.Reload.Results == nil {
			s.Reload.Results = []remediate.Result{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			return fmt.Errorf("write reload results: %w", err)
		}
		return nil
	}
	head := "reload"
	if dryRun {
		head = "reload plan (dry run: add --yes to act)"
	}
	fmt.Fprintf(w, "\n%s\n", head)
	if len(results) == 0 {
		_, err := fmt.Fprintln(w, "  nothing to reload: no Envoy is proven stale")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  STRATEGY\tTARGET\tOUTCOME\tDETAIL")
	for _, res := range results {
		target := res.Target.Envoy
		if target == "" {
			target = res.Target.Namespace + "/" + res.Target.Workload
		}
		outcome := res.Outcome
		switch {
		case res.Skip != "":
			outcome += " (" + res.Skip + ")"
		case res.Reason != "":
			outcome += " (" + res.Reason + ")"
		}
		strategy := string(res.Strategy)
		if strategy == "" {
			strategy = "-"
		}
		detail := res.Detail
		if len(res.Replacements) > 0 {
			detail += " [replaced by " + strings.Join(res.Replacements, ", ") + "]"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", strategy, target, outcome, detail)
	}
	return tw.Flush()
}

// staleCodes are the findings that make a post-check fail for an Envoy.
var staleCodes = []audit.Code{audit.StaleServed, audit.StaleLoaded, audit.StaleProcess, audit.Unreachable,
	audit.RotationFailed, audit.LoadedServedMismatch}

// checkConverged is the post-check on a fresh audit: every named Envoy was observed, each of its
// bindings is converged, none of its findings says stale or unreachable, and every handshake
// returned the desired leaf of a bound source. It returns what it saw.
func checkConverged(in audit.Inputs, rep audit.Report, envoys []string) (string, error) {
	desired := map[string][]string{} // source → desired leaf fingerprints (one per merged item)
	for _, o := range in.Desired {
		for _, it := range o.Items {
			if len(it.Chain) > 0 {
				desired[o.Source.Name] = append(desired[o.Source.Name], pki.Fingerprint(it.Chain[0]))
			}
		}
	}
	var saw []string
	for _, name := range envoys {
		i := slices.IndexFunc(in.Envoys, func(ev audit.EnvoyView) bool { return ev.Config.Name == name })
		if i < 0 {
			return "", fmt.Errorf("%s not observed yet", name)
		}
		ev := in.Envoys[i]
		for _, f := range rep.Findings {
			if f.Subject.Envoy == name && slices.Contains(staleCodes, f.Code) {
				return "", fmt.Errorf("%s: %s: %s", name, f.Code, f.Message)
			}
		}
		var bound []string
		for _, b := range rep.Bindings {
			if b.Envoy != name {
				continue
			}
			if b.State != audit.StateConverged {
				return "", fmt.Errorf("%s: binding to %s is %s", name, b.Source, b.State)
			}
			bound = append(bound, b.Source)
		}
		if len(bound) == 0 {
			return "", fmt.Errorf("%s: no certificate binding observed yet", name)
		}
		served := 0
		for _, res := range ev.Served {
			if len(res.Chain) == 0 {
				return "", fmt.Errorf("%s: handshake with %s (SNI %q) failed: %s", name, res.Target.Address, res.Target.SNI, res.Reason)
			}
			fp := pki.Fingerprint(res.Chain[0])
			ok := false
			for _, s := range bound {
				ok = ok || slices.Contains(desired[s], fp)
			}
			if !ok {
				return "", fmt.Errorf("%s: %s serves sha256 %s, not the desired certificate of %s", name, res.Target.Address, short(fp), strings.Join(bound, ", "))
			}
			served++
		}
		saw = append(saw, fmt.Sprintf("%s serves the desired leaf of %s (sha256 %s) in %d handshakes",
			name, strings.Join(bound, ", "), short(firstOr(desired[bound[0]])), served))
	}
	return strings.Join(saw, "; "), nil
}

func firstOr(xs []string) string {
	if len(xs) == 0 {
		return "?"
	}
	return xs[0]
}

func short(fp string) string {
	if len(fp) > 16 {
		return fp[:16]
	}
	return fp
}

// verifyLocal re-gathers the named local Envoys and audits them.
func (st *reloadState) verifyLocal(ctx context.Context, _ remediate.Action, envoys []string) (string, error) {
	cfg := *st.cfg
	cfg.Envoys = slices.DeleteFunc(slices.Clone(cfg.Envoys), func(e config.Envoy) bool { return !slices.Contains(envoys, e.Name) })
	in := Gather(ctx, &cfg, st.gopts)
	return checkConverged(in, audit.Run(in, st.policy, time.Now()), envoys)
}
