package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/oneshot"
	"github.com/certdrift/certdrift/probe/candidate"
	"github.com/certdrift/certdrift/probe/desired"
)

// exitCannotTell is preflight's "cannot tell" (an Envoy unreachable): not safe, not proven broken.
const exitCannotTell = 3

// preflightCmd is `certdrift preflight`: one audit round, then audit.Preflight on the candidates.
type preflightCmd struct {
	Config      string        `type:"path" placeholder:"FILE" env:"CERTDRIFT_CONFIG" help:"YAML configuration file: the whole local mode, or with --kubeconfig only pairings and policy."`
	Leaf        []string      `name:"leaf" sep:"none" placeholder:"SOURCE=FILE" help:"A candidate leaf (PEM, leaf first, then its chain) for a desired source (repeatable)."`
	Bundle      []string      `name:"bundle" sep:"none" placeholder:"SOURCE=FILE" help:"A candidate CA bundle (PEM) for a desired source (repeatable)."`
	Secret      []string      `name:"secret" sep:"none" placeholder:"[SOURCE=]FILE" help:"A Secret manifest (kubectl create secret … --dry-run=client -o yaml; several Secrets as YAML documents): tls.crt is the candidate leaf, ca.crt the bundle, tls.key is ignored. It names its source (namespace/name; the name in local mode) unless SOURCE= is given (repeatable)."`
	Output      string        `short:"o" default:"table" enum:"table,json" env:"CERTDRIFT_OUTPUT" help:"Report format: ${enum}."`
	Timeout     time.Duration `default:"0s" env:"CERTDRIFT_TIMEOUT" help:"Deadline for each admin request and each handshake; 0 uses policy.timeout from the config."`
	Concurrency int           `default:"8" env:"CERTDRIFT_CONCURRENCY" help:"Most admin requests, file reads and handshakes in flight at once, per view."`

	kubeFlags `embed:"" group:"kube"`
}

func (c *preflightCmd) Validate() error {
	if c.Concurrency < 1 || c.Concurrency > 1024 {
		return fmt.Errorf("--concurrency %d: want 1..1024", c.Concurrency)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("--timeout %s: must not be negative", c.Timeout)
	}
	if err := c.kubeFlags.validate(); err != nil {
		return err
	}
	if err := c.kubeFlags.validateSource(c.Config, false); err != nil {
		return err
	}
	if len(c.Leaf)+len(c.Bundle)+len(c.Secret) == 0 {
		return errors.New("no candidate: give --leaf SOURCE=FILE, --bundle SOURCE=FILE or --secret FILE")
	}
	return nil
}

// candidates reads every --leaf, --bundle and --secret (exit 2 on any problem, naming the file).
func (c *preflightCmd) candidates() ([]desired.Candidate, error) {
	leaves, err := candidate.Leaves(c.Leaf)
	if err != nil {
		return nil, fmt.Errorf("--leaf %w", err)
	}
	bundles, err := candidate.Bundles(c.Bundle)
	if err != nil {
		return nil, fmt.Errorf("--bundle %w", err)
	}
	secrets, err := candidate.SecretManifests(c.Secret, c.kubeFlags.enabled())
	if err != nil {
		return nil, fmt.Errorf("--secret %w", err)
	}
	return candidate.Merge(slices.Concat(leaves, bundles, secrets))
}

func (c *preflightCmd) Run(ctx context.Context, io *streams, log *slog.Logger) error {
	cands, err := c.candidates()
	if err != nil {
		return noRun(err)
	}
	o := c.kubeFlags.source(c.Config, c.policy, c.Concurrency, log)
	auditCmd := "certdrift audit --config " + c.Config
	if c.kubeFlags.enabled() {
		// The candidates' sources are read by name like the pairings' (they need not be mounted).
		for _, cd := range cands {
			o.Sources = append(o.Sources, cd.Source)
		}
		auditCmd = "certdrift audit " + strings.Join(c.kubeArgs(), " ")
	}
	round, err := oneshot.Gather(ctx, o)
	if err != nil {
		return noRun(err)
	}
	r, err := round.Preflight(ctx, oneshot.Output{W: io.Out, JSON: c.Output == "json", Log: log}, cands, auditCmd)
	if err != nil {
		return noRun(err)
	}
	switch r.Verdict {
	case audit.PreflightBreaks:
		return &exitError{code: exitFindings, silent: true, err: errors.New("the rotation would break handshakes")}
	case audit.PreflightUnknown:
		return &exitError{code: exitCannotTell, silent: true, err: errors.New("preflight cannot tell")}
	}
	return nil
}

func (c *preflightCmd) policy(p config.Policy) config.Policy {
	if c.Timeout > 0 {
		p.Timeout = config.Duration(c.Timeout)
	}
	return p
}

// kubeArgs are the flags that chose the cluster and scope, for the audit command in the steps.
func (c *preflightCmd) kubeArgs() []string {
	var a []string
	switch {
	case c.InCluster:
		a = append(a, "--in-cluster")
	default:
		a = append(a, "--kubeconfig", c.Kubeconfig)
	}
	if c.Context != "" {
		a = append(a, "--context", c.Context)
	}
	if len(c.Namespace) > 0 {
		a = append(a, "--namespace", strings.Join(c.Namespace, ","))
	}
	if c.Config != "" {
		a = append(a, "--config", c.Config)
	}
	return a
}
