package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/exporter"
	"github.com/certdrift/certdrift/remediate"
)

// serveCmd is `certdrift serve`: the exporter. Rounds of observation and judgement run on their
// own schedule (and early on Kubernetes changes); scrapes read the latest round.
type serveCmd struct {
	Config        string        `type:"path" placeholder:"FILE" env:"CERTDRIFT_CONFIG" help:"YAML configuration file: the whole local mode, or with --kubeconfig only pairings and policy; reloaded on SIGHUP and POST /-/reload."`
	ConfigCheck   bool          `name:"config.check" env:"CERTDRIFT_CONFIG_CHECK" help:"Only validate the flags and the configuration file, print the verdict and exit (0 valid, 2 not)."`
	ListenAddress []string      `name:"web.listen-address" group:"web" default:":9809" env:"CERTDRIFT_WEB_LISTEN_ADDRESS" help:"Addresses to serve metrics on (repeatable)."`
	WebConfigFile string        `name:"web.config.file" group:"web" type:"path" placeholder:"FILE" env:"CERTDRIFT_WEB_CONFIG_FILE" help:"exporter-toolkit web configuration (TLS, client certificates, basic auth)."`
	ProbeAddress  string        `name:"web.probe-address" group:"web" placeholder:"ADDR" env:"CERTDRIFT_WEB_PROBE_ADDRESS" help:"Optional plain-HTTP address serving only /-/healthy and /-/ready, for kubelet probes when the metrics port requires TLS or auth."`
	ScrapeTimeout time.Duration `name:"web.scrape-timeout" group:"web" default:"10s" env:"CERTDRIFT_WEB_SCRAPE_TIMEOUT" help:"Most time one /metrics request may take."`
	MaxRequests   int           `name:"web.max-requests" group:"web" default:"10" env:"CERTDRIFT_WEB_MAX_REQUESTS" help:"Most /metrics requests served at once; more get 503."`
	MaxConns      int           `name:"web.max-connections" group:"web" default:"512" env:"CERTDRIFT_WEB_MAX_CONNECTIONS" help:"Most connections held open by the metrics addresses together, and by the probe address; over it the longest-idle connection is closed."`
	IdleTimeout   time.Duration `name:"web.idle-timeout" group:"web" default:"15s" env:"CERTDRIFT_WEB_IDLE_TIMEOUT" help:"How long a keep-alive connection may wait for its next request."`
	HeaderTimeout time.Duration `name:"web.read-header-timeout" group:"web" default:"5s" env:"CERTDRIFT_WEB_READ_HEADER_TIMEOUT" help:"How long a client may take to send its request headers (and its TLS handshake)."`
	Interval      time.Duration `default:"30s" env:"CERTDRIFT_INTERVAL" help:"Time between rounds of admin reads and handshakes."`
	Jitter        float64       `default:"0.1" env:"CERTDRIFT_JITTER" help:"Fraction of --interval by which each wait is randomly shortened or lengthened, so replicas do not probe in step."`
	RoundTimeout  time.Duration `name:"round-timeout" default:"0s" env:"CERTDRIFT_ROUND_TIMEOUT" help:"Deadline for one round; 0 means --interval."`
	Debounce      time.Duration `default:"200ms" env:"CERTDRIFT_DEBOUNCE" help:"Kubernetes mode: after a Secret, ConfigMap, pod or cert-manager Certificate change, wait this long for more before an early round."`
	Timeout       time.Duration `default:"0s" env:"CERTDRIFT_TIMEOUT" help:"Deadline for each admin request and each handshake; 0 uses policy.timeout."`
	Concurrency   int           `default:"8" env:"CERTDRIFT_CONCURRENCY" help:"Most admin requests, file reads and handshakes in flight at once, per view."`
	Grace         time.Duration `default:"0s" env:"CERTDRIFT_GRACE" help:"How long a rotation may take to reach Envoy before it is drift; 0 uses policy.grace."`
	Shard         int           `default:"0" env:"CERTDRIFT_SHARD" help:"This replica's shard, 0..--total-shards-1."`
	TotalShards   int           `name:"total-shards" default:"1" env:"CERTDRIFT_TOTAL_SHARDS" help:"Number of replicas splitting pods and Secrets by a stable hash of namespace/name."`

	kubeFlags      `embed:"" group:"kube"`
	remediateFlags `embed:"" group:"repair"`
}

func (c *serveCmd) Validate() error {
	if err := c.options(nil, buildInfo{}).Validate(); err != nil {
		return err
	}
	if err := c.kubeFlags.validate(); err != nil {
		return err
	}
	if err := c.remediateFlags.validate(c.kubeFlags.enabled(), c.TotalShards); err != nil {
		return err
	}
	if err := c.kubeFlags.validateSource(c.Config, c.ConfigCheck); err != nil {
		return err
	}
	if c.WebConfigFile != "" {
		if err := exporter.ValidateWebConfig(c.WebConfigFile); err != nil {
			return fmt.Errorf("--web.config.file %s: %w", c.WebConfigFile, err)
		}
	}
	return nil
}

// options are the exporter's options from the flags.
func (c *serveCmd) options(log *slog.Logger, b buildInfo) exporter.Options {
	return exporter.Options{
		Config: c.Config, Kubernetes: c.kubeFlags.enabled(),
		Interval: c.Interval, Jitter: c.Jitter, RoundTimeout: c.RoundTimeout, Debounce: c.Debounce,
		Timeout: c.Timeout, Grace: c.Grace, Concurrency: c.Concurrency,
		Shard: collector.Shard{Index: c.Shard, Total: c.TotalShards},
		Build: collector.BuildInfo{Version: b.Version, Revision: b.Commit, GoVersion: b.GoVersion},
		Web: exporter.Web{ListenAddresses: c.ListenAddress, ConfigFile: c.WebConfigFile, ProbeAddress: c.ProbeAddress,
			ScrapeTimeout: c.ScrapeTimeout, MaxRequests: c.MaxRequests, MaxConns: c.MaxConns,
			IdleTimeout: c.IdleTimeout, HeaderTimeout: c.HeaderTimeout},
		Log: log,
	}
}

func (c *serveCmd) Run(ctx context.Context, io *streams, log *slog.Logger, b buildInfo) error {
	if c.ConfigCheck {
		// Validate has checked the flags (and --web.config.file) already.
		return configCheck(io, c.Config, c.kubeFlags.enabled(), false)
	}
	x, err := exporter.New(c.options(log, b))
	if err != nil {
		return noRun(err)
	}
	if c.kubeFlags.enabled() {
		defer x.Close()
		if err := x.Start(ctx, exporter.Kube{Options: c.kubeFlags.options, REST: c.kubeFlags.restConfig}, c.remediateFlags.options(log)); err != nil {
			return noRun(err)
		}
	}
	sigCtx, stop := context.WithCancel(ctx)
	defer stop()
	go c.signals(sigCtx, x, log)
	if err := x.Run(ctx); err != nil {
		return noRun(err)
	}
	return nil
}

// signals turns SIGHUP into a reload.
func (c *serveCmd) signals(ctx context.Context, x *exporter.Exporter, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if c.kubeFlags.enabled() {
			log.Info("SIGHUP ignored: Kubernetes mode has no configuration file")
			continue
		}
		_ = x.Reload(ctx) // logged and counted by the exporter
	}
}

// remediateFlags are `certdrift serve --remediate`: `audit --reload --yes` after every complete
// round of the exporter, by the one replica that holds the election Lease. Off by default. The
// repair policy is audit's (--reload-*); the flags here are the election's.
type remediateFlags struct {
	Remediate              bool          `name:"remediate" env:"CERTDRIFT_REMEDIATE" help:"Kubernetes mode: after each complete round, reload Envoys proven stale (see docs/repair.md); only the replica holding --remediate-lease-name acts."`
	RemediateDryRun        bool          `name:"remediate-dry-run" env:"CERTDRIFT_REMEDIATE_DRY_RUN" help:"With --remediate: plan and count (outcome planned) but change nothing."`
	RemediateLeaseName     string        `name:"remediate-lease-name" default:"certdrift-remediate" env:"CERTDRIFT_REMEDIATE_LEASE_NAME" help:"Lease (coordination.k8s.io) the replicas elect a leader on, in --reload-lease-namespace."`
	RemediateIdentity      string        `name:"remediate-identity" env:"CERTDRIFT_REMEDIATE_IDENTITY" help:"This replica's name in the election (default: $POD_NAME or the host name, plus a random suffix)."`
	RemediateLeaseDuration time.Duration `name:"remediate-lease-duration" default:"15s" env:"CERTDRIFT_REMEDIATE_LEASE_DURATION" help:"How long a leader's Lease lasts without renewal; a follower takes over after it (at once when the leader shuts down cleanly)."`
	// The repair policy, shared with audit --reload (remediate.Policy). Its flags were
	// --remediate-strategy, --remediate-budget, … here; those names still work (hidden).
	//lint:ignore SA5008 kong reads every set: entry of a tag (one kong variable each), not only the first
	Repair remediate.Policy `embed:"" prefix:"reload-" set:"reload_budget=1" set:"reload_per=round" set:"reload_strategies=,evict,rollout-restart,admin-quit" set:"reload_lease_default="`
}

func (f *remediateFlags) validate(kubeMode bool, totalShards int) error {
	if !f.Remediate {
		if f.RemediateDryRun {
			return errors.New("--remediate-dry-run needs --remediate")
		}
		return nil
	}
	r := f.options(nil)
	err := r.Validate(kubeMode, totalShards)
	f.Repair = r.Policy // with its lease namespace filled in
	return err
}

// options are the exporter's repair options, nil without --remediate.
func (f *remediateFlags) options(log *slog.Logger) *exporter.RepairOptions {
	if !f.Remediate {
		return nil
	}
	return &exporter.RepairOptions{Policy: f.Repair, DryRun: f.RemediateDryRun, LeaseName: f.RemediateLeaseName,
		Identity: f.RemediateIdentity, LeaseDuration: f.RemediateLeaseDuration, Log: log}
}
