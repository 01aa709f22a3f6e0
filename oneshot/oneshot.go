// Package oneshot is `certdrift audit` and `certdrift preflight` without their flags, as exporter
// is `certdrift serve` without its: one round read from a configuration file in local or
// Kubernetes mode (Gather), and `audit --reload`'s repair of what that round showed, observing
// again through the round's own session (Round.Repair).
//
// It wires the packages below it and owns no rule of its own: observing is gather's, judging
// audit's, repairing remediate's. cmd/certdrift fills Options from flags, judges, renders and
// maps the outcome to exit codes; nothing else imports this package.
package oneshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/remediate"
)

// Options say where a round is read from.
type Options struct {
	// Config is the configuration file: the whole local mode, or in Kubernetes mode only peer
	// pairings and policy (the cluster supplies the desired certificates and the Envoys); ""
	// for none (Kubernetes mode only).
	Config string
	// Kube is Kubernetes mode; nil is local mode.
	Kube *Kube
	// Policy applies the command's flags over the file's policy; nil keeps the file's.
	Policy func(config.Policy) config.Policy
	// Concurrency bounds the reads of each view.
	Concurrency int
	Log         *slog.Logger
	// Sources are desired sources read by name in Kubernetes mode besides those the pairings
	// name (preflight's candidates: they need not be mounted).
	Sources []string
	// Session gathers the Kubernetes round through a gather.Session rather than
	// gather.KubeOnce, as the repair's plan expects; KeepSession keeps it open until
	// Round.Close, so that the repair's post-checks and admin-quit reuse its informers instead
	// of listing every Secret again.
	Session, KeepSession bool
}

// Kube is how Kubernetes mode reaches and reads the cluster. Both are called after the
// configuration file was read, in this order, so that a bad file is reported first.
type Kube struct {
	// Options turns the round's gather.Options (the policy's timeout, Concurrency, Log) into the
	// cluster's gather options.
	Options func(gather.Options) (gather.KubeOptions, error)
	// REST is the cluster's client configuration.
	REST func() (*rest.Config, error)
}

// Round is one gathered round and what the repair needs to observe again.
type Round struct {
	Inputs audit.Inputs
	// Config is the configuration file as read (Kubernetes mode: pairings and policy, or the
	// defaults without a file); Policy is its policy with the command's flags applied.
	Config *config.Config
	Policy config.Policy

	rest    *rest.Config    // Kubernetes mode
	session *gather.Session // Kubernetes mode, with KeepSession
	local   gather.Options  // local mode
}

// Gather reads the configuration file and gathers one round of the whole fleet. In local mode
// it fails only on the file; in Kubernetes mode also when the cluster cannot be read at all.
func Gather(ctx context.Context, o Options) (*Round, error) {
	if o.Kube == nil {
		cfg, err := config.Load(o.Config)
		if err != nil {
			return nil, err
		}
		r := &Round{Config: cfg, Policy: o.policy(cfg.Policy)}
		r.local = o.gatherOptions(r.Policy)
		r.Inputs = gather.Local(ctx, cfg, gather.Fleet, r.local)
		return r, nil
	}
	r, opts, err := o.kube()
	if err != nil {
		return nil, err
	}
	opts.PairingSources = append(gather.PairingSources(r.Config.Pairings), o.Sources...)
	switch {
	case !o.Session:
		r.Inputs, err = gather.KubeOnce(ctx, r.rest, r.Policy, opts)
		if err != nil {
			return nil, err
		}
	default:
		s, err := gather.Start(ctx, r.rest, r.Policy, opts)
		if err != nil {
			return nil, err
		}
		r.Inputs = s.Gather(ctx, gather.Fleet)
		if o.KeepSession {
			r.session = s
		} else {
			s.Close() // a dry run observes nothing more
		}
	}
	r.Inputs.Config.Pairings = r.Config.Pairings
	return r, nil
}

// Inventory runs Kubernetes mode's Secret/ConfigMap inventory alone to its initial sync and
// writes its size (gather.SyncInventory) to w as JSON, for the scale benchmark.
func Inventory(ctx context.Context, o Options, w io.Writer) error {
	if o.Kube == nil {
		return errors.New("the inventory is Kubernetes mode's")
	}
	r, opts, err := o.kube()
	if err != nil {
		return err
	}
	size, err := gather.SyncInventory(ctx, r.rest, opts)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(w).Encode(size); err != nil {
		return fmt.Errorf("write inventory summary: %w", err)
	}
	return nil
}

// kube is what Kubernetes mode reads before it gathers: the file (pairings and policy), the
// policy after the flags, the gather options and the REST config.
func (o Options) kube() (*Round, gather.KubeOptions, error) {
	cfg := &config.Config{Policy: config.DefaultPolicy}
	if o.Config != "" {
		var err error
		if cfg, err = config.LoadCluster(o.Config); err != nil {
			return nil, gather.KubeOptions{}, err
		}
	}
	r := &Round{Config: cfg, Policy: o.policy(cfg.Policy)}
	opts, err := o.Kube.Options(o.gatherOptions(r.Policy))
	if err != nil {
		return nil, gather.KubeOptions{}, err
	}
	if r.rest, err = o.Kube.REST(); err != nil {
		return nil, gather.KubeOptions{}, err
	}
	kubeapi.RouteKlog(o.Log)
	return r, opts, nil
}

func (o Options) policy(p config.Policy) config.Policy {
	if o.Policy == nil {
		return p
	}
	return o.Policy(p)
}

func (o Options) gatherOptions(p config.Policy) gather.Options {
	return gather.Options{Timeout: p.Timeout.D(), Concurrency: o.Concurrency, Log: o.Log}
}

// Close ends the session KeepSession kept; a Round is done with after it.
func (r *Round) Close() {
	if r != nil && r.session != nil {
		r.session.Close()
		r.session = nil
	}
}

// Repair is `audit --reload` as the round sees it: the repair policy and how to act.
type Repair struct {
	Policy remediate.Policy
	// Command is the exec strategy's command, with {envoy} and {admin} to replace.
	Command []string
	// DryRun plans without acting (--reload without --yes).
	DryRun bool
	// Metrics counts every result, as serve --remediate does.
	Metrics remediate.Recorder
	Log     *slog.Logger
}

// Repair plans the reloads of the Envoys the judged report proves stale and, unless DryRun,
// carries the plan out, each action post-checked by observing its Envoys again: through the
// round's session in Kubernetes mode (gathered with KeepSession), by reading the configured
// Envoys again in local mode.
func (r *Round) Repair(ctx context.Context, report audit.Report, p Repair) ([]remediate.Result, error) {
	c := remediate.OnceConfig{Policy: p.Policy, Command: p.Command, DryRun: p.DryRun, AuditPolicy: r.Policy,
		Observe: r.observeLocal, Metrics: p.Metrics, Log: p.Log}
	if r.rest != nil {
		if !p.DryRun && r.session == nil {
			return nil, errors.New("the round's Kubernetes session was not kept for the post-checks (Options.KeepSession)")
		}
		client, err := kubeapi.NewForConfig(r.rest)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		c.Client, c.Observe = client, nil
		if r.session != nil {
			c.Observe, c.OpenAdmin = r.session.GatherEnvoys, r.session.OpenAdminURL
		}
	}
	return remediate.Once(ctx, c, report, r.Inputs)
}

// observeLocal gathers the named local Envoys again, for the post-check.
func (r *Round) observeLocal(ctx context.Context, envoys []string) audit.Inputs {
	cfg := *r.Config
	cfg.Envoys = slices.DeleteFunc(slices.Clone(cfg.Envoys), func(e config.Envoy) bool { return !slices.Contains(envoys, e.Name) })
	return gather.Local(ctx, &cfg, gather.Fleet, r.local)
}
