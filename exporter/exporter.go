package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/probe/envoyadmin"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/remediate"
)

// Options are `certdrift serve`'s flags, as the exporter needs them.
type Options struct {
	// Config is the configuration file: the whole local mode, or in Kubernetes mode pairings and
	// policy; "" for none (Kubernetes mode only).
	Config string
	// Kubernetes is Kubernetes mode: StartKube must be called before Run.
	Kubernetes bool
	// Interval is the time between rounds, lengthened or shortened by up to Jitter of it.
	Interval time.Duration
	Jitter   float64
	// RoundTimeout is the deadline of one round; 0 means Interval.
	RoundTimeout time.Duration
	// Debounce is how long an early round waits for more Kubernetes changes.
	Debounce time.Duration
	// Timeout and Grace override the policy's when positive.
	Timeout, Grace time.Duration
	// Concurrency bounds the local mode's reads per view.
	Concurrency int
	Shard       collector.Shard
	Build       collector.BuildInfo
	Web         Web
	Log         *slog.Logger
}

// Repair is `serve --remediate` as the exporter sees it (remediate.Remediator).
type Repair interface {
	Run(ctx context.Context) error
	// Offer hands over a complete Kubernetes round; current is false when the Kubernetes source
	// was down during it.
	Offer(w remediate.Work, current bool)
}

// Exporter is one running `certdrift serve`.
type Exporter struct {
	opt   Options
	log   *slog.Logger
	store *collector.Store

	// Local mode: the current configuration, swapped by reloads.
	cfg atomic.Pointer[config.Config]
	// Kubernetes mode.
	kube *gather.Session
	// repair is serve --remediate (nil when off), its metrics in repairReg.
	repair    Repair
	repairReg prometheus.Gatherer

	trigger chan struct{}   // an early round, debounced
	desired *desiredQueue   // Secret changes for the store, between rounds
	reload  chan chan error // a reload request and where to answer
	// admins are the local mode's admin clients, reused across rounds.
	admins envoyadmin.Transports
}

// New reads the configuration; nothing runs until Run.
func New(opt Options) (*Exporter, error) {
	x := &Exporter{opt: opt, log: opt.Log, trigger: make(chan struct{}, 1), reload: make(chan chan error),
		desired: newDesiredQueue()}
	x.store = collector.NewStore(collector.Options{Shard: opt.Shard, Build: opt.Build})
	if opt.Config != "" {
		cfg, err := x.loadConfig()
		if err != nil {
			return nil, err
		}
		x.cfg.Store(cfg)
		x.store.ConfigReloaded(true, time.Now())
	}
	return x, nil
}

// Close ends the Kubernetes session.
func (x *Exporter) Close() {
	if x.kube != nil {
		x.kube.Close()
	}
}

// Run serves the metrics and runs rounds until ctx ends, then shuts down within a grace period.
func (x *Exporter) Run(ctx context.Context) error {
	srv, err := x.listen()
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); x.loop(runCtx) }()
	go func() { defer wg.Done(); x.desired.run(runCtx, x.store) }()
	if x.repair != nil {
		wg.Add(1)
		go func() { defer wg.Done(); _ = x.repair.Run(runCtx) }()
	}
	return srv.serve(ctx, cancel, &wg)
}

// Reload reads the configuration again and, when it is valid, runs a round with it; it returns
// when the reload is done (or ctx ends). A failed reload keeps the previous configuration.
func (x *Exporter) Reload(ctx context.Context) error {
	if x.opt.Kubernetes {
		return errNoFile
	}
	answer := make(chan error, 1)
	select {
	case x.reload <- answer:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errNoFile = errors.New("no configuration file to reload in Kubernetes mode")

// loop runs rounds: one at once, then every interval (with jitter), early after a debounced
// change, and after every successful reload. Rounds never overlap.
func (x *Exporter) loop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-x.trigger:
			// Let a burst of informer events (a rollout, a cert-manager renewal touching several
			// Secrets) settle into one round.
			select {
			case <-time.After(x.opt.Debounce):
			case <-ctx.Done():
				return
			}
			select {
			case <-x.trigger:
			default:
			}
		case answer := <-x.reload:
			err := x.reloadConfig()
			answer <- err
			if err != nil {
				continue
			}
		}
		x.runRound(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(x.nextWait())
	}
}

func (x *Exporter) nextWait() time.Duration {
	j := x.opt.Jitter * (2*rand.Float64() - 1)
	return time.Duration(float64(x.opt.Interval) * (1 + j))
}

// loadConfig reads the configuration: the whole local mode, or in Kubernetes mode pairings and policy.
func (x *Exporter) loadConfig() (*config.Config, error) {
	if x.opt.Kubernetes {
		return config.LoadCluster(x.opt.Config)
	}
	return config.Load(x.opt.Config)
}

func (x *Exporter) reloadConfig() error {
	if x.opt.Config == "" {
		return errors.New("no --config to reload")
	}
	cfg, err := x.loadConfig()
	now := time.Now()
	x.store.ConfigReloaded(err == nil, now)
	if err != nil {
		x.log.Error("configuration reload failed; keeping the previous one", "config", x.opt.Config, "err", err)
		return err
	}
	x.cfg.Store(cfg)
	x.log.Info("configuration reloaded", "config", x.opt.Config, "desired_sources", len(cfg.Desired), "envoys", len(cfg.Envoys))
	return nil
}

// Policy is the configuration's policy (the default without one) with Timeout and Grace applied.
func (x *Exporter) Policy() config.Policy {
	p := config.DefaultPolicy
	if cfg := x.cfg.Load(); cfg != nil {
		p = cfg.Policy
	}
	if x.opt.Timeout > 0 {
		p.Timeout = config.Duration(x.opt.Timeout)
	}
	if x.opt.Grace > 0 {
		p.Grace = config.Duration(x.opt.Grace)
	}
	return p
}

// runRound gathers, judges and records one round. A round cut short by its deadline is still
// recorded: Gather marks what it could not observe, and the audit reports it as UNREACHABLE.
func (x *Exporter) runRound(ctx context.Context) {
	timeout := x.opt.RoundTimeout
	if timeout <= 0 {
		timeout = x.opt.Interval
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	// Changes already signalled are read by this round: without this, the initial list's
	// events (10,000 Secret adds) queue a second full round right after the first, which then
	// competes with the first scrapes for the CPU.
	select {
	case <-x.trigger:
	default:
	}
	policy := x.Policy()
	var r collector.Round
	if x.kube != nil {
		in := x.kube.Gather(rctx, gather.Fleet)
		if cfg := x.cfg.Load(); cfg != nil {
			in.Config.Pairings = cfg.Pairings
		}
		inv := x.kube.Inventory()
		r = collector.Round{Inputs: in, Report: audit.Run(in, policy, time.Now()), Kubernetes: true,
			SourcesUp: map[string]bool{"kubernetes": inv.Synced() && len(inv.Errors()) == 0}}
	} else {
		cfg := x.cfg.Load()
		in := gather.Local(rctx, cfg, gather.Fleet, gather.Options{Timeout: policy.Timeout.D(), Concurrency: x.opt.Concurrency, Log: x.log, Admins: &x.admins})
		filesUp := true
		for _, o := range in.Desired {
			filesUp = filesUp && o.Err == nil
		}
		r = collector.Round{Inputs: in, Report: audit.Run(in, policy, time.Now()), SourcesUp: map[string]bool{"files": filesUp}}
	}
	if ctx.Err() != nil {
		return // shutting down: a half-observed round would only mislead
	}
	r.Started, r.Finished = start, time.Now()
	x.store.Record(r)
	// Rounds from local mode never reach repair.
	if x.repair != nil && r.Kubernetes {
		x.repair.Offer(remediate.Work{Started: r.Started, Report: r.Report, Inputs: r.Inputs}, r.SourcesUp["kubernetes"])
	}
	x.log.Debug("round complete", "findings", len(r.Report.Findings), "bindings", len(r.Report.Bindings),
		"duration_seconds", r.Finished.Sub(start).Seconds())
}

// PodShard is the gather.KubeOptions.Shard of a replica's shard: a pod is probed by the replica
// that exposes it (collector.Shard on "namespace/pod", the Envoy's name in Kubernetes mode).
// nil with one shard: every pod.
func PodShard(sh collector.Shard) func(namespace, pod string) bool {
	if sh.Total <= 1 {
		return nil
	}
	return func(namespace, pod string) bool { return sh.Owns(namespace + "/" + pod) }
}

// StartKube starts the informers of opts (whose callbacks, shard and pairing sources it sets);
// their changes ask for an early round.
func (x *Exporter) StartKube(ctx context.Context, rc *rest.Config, opts gather.KubeOptions) error {
	poke := func() {
		select {
		case x.trigger <- struct{}{}:
		default:
		}
	}
	// A Secret change goes to the desired view at once (issue 5: within a second; a round at
	// 10,000 Secrets takes seconds) and asks for an early round for the findings. The initial
	// list is neither: the first round reads it all, and its adds, delivered after the sync,
	// would otherwise queue a second full round over the first scrapes.
	opts.OnDesiredChange = func(ch kube.Change) {
		if ch.Initial {
			return
		}
		if x.store.Ready() {
			x.desired.add(ch)
		}
		poke()
	}
	opts.OnTargetChange = func(kube.ChangeOp, string, string) { poke() }
	// A renewal, a failed issuance, cert-manager installed: judged now, not at the next interval.
	opts.OnCertManagerChange = func(kube.ChangeOp, string, string, string) { poke() }
	opts.Shard = PodShard(x.opt.Shard)
	// Sources the pairings name are read by name when the inventory does not watch them (a
	// CA-only Opaque Secret), as audit does. Read at start: a reload that adds a pairing to a
	// source nothing mounts takes effect at the next start.
	if cfg := x.cfg.Load(); cfg != nil {
		opts.PairingSources = gather.PairingSources(cfg.Pairings)
	}
	kubeapi.RouteKlog(x.log)
	countKubeRequests(x.store)
	s, err := gather.Start(ctx, rest.CopyConfig(rc), x.Policy(), opts)
	if err != nil {
		return err
	}
	x.kube = s
	return nil
}

// EnableRepair runs `serve --remediate` after StartKube: the exporter's session is the repair's
// post-check and admin transport, its policy the post-check's, its /metrics the repair's.
func (x *Exporter) EnableRepair(cfg remediate.RemediatorConfig) error {
	if x.kube == nil {
		return errors.New("--remediate needs the Kubernetes session")
	}
	m := NewRepairMetrics()
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		return fmt.Errorf("register repair metrics: %w", err)
	}
	cfg.Observe, cfg.OpenAdmin, cfg.AuditPolicy = x.kube.GatherEnvoys, x.kube.OpenAdminURL, x.Policy
	cfg.Metrics = m
	cfg.SetBlocked = func(bs []remediate.BlockedWorkload) {
		out := make([]collector.BlockedWorkload, len(bs))
		for i, b := range bs {
			out[i] = collector.BlockedWorkload(b)
		}
		m.SetBlocked(out)
	}
	if cfg.Log == nil {
		cfg.Log = x.log
	}
	x.repair, x.repairReg = remediate.NewRemediator(cfg), reg
	return nil
}

// NewRepairMetrics declares the repair counters over remediate's closed sets of strategies and
// outcomes; the collector does not import remediate, so the sets are handed over here.
func NewRepairMetrics() *collector.RepairMetrics {
	strategies := make([]string, len(remediate.Strategies))
	for i, s := range remediate.Strategies {
		strategies[i] = string(s)
	}
	return collector.NewRepairMetrics(strategies, remediate.Outcomes).WithReasons(remediate.Reasons)
}
