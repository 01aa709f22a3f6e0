package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/oneshot"
	"github.com/certdrift/certdrift/remediate"
)

// auditCmd is `certdrift audit`: one pass over every configured source and Envoy.
type auditCmd struct {
	Config      string        `type:"path" placeholder:"FILE" env:"CERTDRIFT_CONFIG" help:"YAML configuration file: the whole local mode, or with --kubeconfig only pairings and policy."`
	ConfigCheck bool          `name:"config.check" env:"CERTDRIFT_CONFIG_CHECK" help:"Only load and validate the configuration, then exit."`
	Output      string        `short:"o" default:"table" enum:"table,json" env:"CERTDRIFT_OUTPUT" help:"Report format: ${enum}."`
	FailOn      string        `default:"warning" enum:"info,warning,critical" env:"CERTDRIFT_FAIL_ON" help:"Exit 1 when a finding is at or above this severity: ${enum}."`
	Timeout     time.Duration `default:"0s" env:"CERTDRIFT_TIMEOUT" help:"Deadline for each admin request and each handshake; 0 uses policy.timeout from the config."`
	Concurrency int           `default:"8" env:"CERTDRIFT_CONCURRENCY" help:"Most admin requests, file reads and handshakes in flight at once, per view."`
	Grace       time.Duration `default:"0s" env:"CERTDRIFT_GRACE" help:"How long a rotation may take to reach Envoy before it is drift; 0 uses policy.grace (default 2m)."`
	// A report that could not look is not clean: without this flag, anything not judged fails
	// the run like a finding at --fail-on would.
	AllowPartial bool `name:"allow-partial" env:"CERTDRIFT_ALLOW_PARTIAL" help:"Exit 0 even when coverage is incomplete (a source missing or unreadable, an admin or TLS endpoint unreachable, a binding not judged). By default anything not judged fails like a finding at --fail-on."`

	// Kubernetes mode: used when --kubeconfig or --in-cluster is given instead of --config.
	kubeFlags `embed:"" group:"kube"`
	// Repair (docs/repair.md): --reload, --yes and their guards.
	reloadFlags `embed:"" group:"repair"`
}

// Validate is called by kong after parsing, so a bad value is a usage error (exit 2).
func (c *auditCmd) Validate() error {
	if c.Concurrency < 1 || c.Concurrency > 1024 {
		return fmt.Errorf("--concurrency %d: want 1..1024", c.Concurrency)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("--timeout %s: must not be negative", c.Timeout)
	}
	if c.Grace < 0 {
		return fmt.Errorf("--grace %s: must not be negative", c.Grace)
	}
	if err := c.kubeFlags.validate(); err != nil {
		return err
	}
	if err := c.reloadFlags.validate(); err != nil {
		return err
	}
	return c.kubeFlags.validateSource(c.Config, c.ConfigCheck)
}

func (c *auditCmd) Run(ctx context.Context, io *streams, log *slog.Logger) error {
	defer c.reloadFlags.closeReload()
	if c.ConfigCheck {
		return configCheck(io, c.Config, c.kubeFlags.enabled(), c.Output == "json")
	}
	failOn, ok := audit.ParseSeverity(c.FailOn)
	if !ok { // kong's enum makes this unreachable; kept so a new level cannot slip through
		return noRun(fmt.Errorf("--fail-on %q: want info, warning or critical", c.FailOn))
	}
	o := c.kubeFlags.source(c.Config, c.policy, c.Concurrency, log)
	if c.InventoryOnly && c.kubeFlags.enabled() { // the inventory's size as JSON, for test/scale
		if err := oneshot.Inventory(ctx, o, io.Out); err != nil {
			return noRun(err)
		}
		return nil
	}
	// With --reload the round keeps what the repair needs, and with --yes the Kubernetes session.
	o.Session, o.KeepSession = c.Reload, c.Reload && c.Yes
	start := time.Now()
	r, err := oneshot.Gather(ctx, o)
	if err != nil {
		return noRun(err)
	}
	c.reloadFlags.state = &reloadState{round: r, policy: r.Policy}
	a, err := r.Audit(ctx, oneshot.Output{W: io.Out, JSON: c.Output == "json", Log: log}, c.reloadFlags.repair(log), start)
	if err != nil {
		return noRun(err)
	}
	if bad := remediate.Failed(a.Repairs); bad > 0 {
		return &exitError{code: exitReloadFailed, silent: true, err: fmt.Errorf("%d reload actions refused, failed or blocked", bad)}
	}
	if a.Report.MaxSeverity() >= failOn {
		return &exitError{code: exitFindings, silent: true,
			err: errors.New("findings at or above --fail-on " + failOn.String())}
	}
	if cov := a.Report.Summary.Coverage; !cov.Complete && !c.AllowPartial {
		return &exitError{code: exitFindings, err: fmt.Errorf(
			"coverage incomplete: %s; the report is not clean (--allow-partial accepts this)", cov.Shortfall())}
	}
	return nil
}

// policy is the configuration's policy with --timeout and --grace applied.
func (c *auditCmd) policy(p config.Policy) config.Policy {
	if c.Timeout > 0 {
		p.Timeout = config.Duration(c.Timeout)
	}
	if c.Grace > 0 {
		p.Grace = config.Duration(c.Grace)
	}
	return p
}
