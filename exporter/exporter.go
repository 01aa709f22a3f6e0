package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/exporter-toolkit/web"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/internal/connlimit"
	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/probe/envoyadmin"
	"github.com/certdrift/certdrift/probe/kube"
)

// serveCmd is `certdrift serve`: the exporter. Rounds of observation and judgement run on their
// own schedule (and early on Kubernetes changes); scrapes read the latest round.
type serveCmd struct {
	Config        string        `type:"path" placeholder:"FILE" env:"CERTDRIFT_CONFIG" help:"YAML configuration file: the whole local mode, or with --kubeconfig only pairings and policy; reloaded on SIGHUP and POST /-/reload."`
	ListenAddress []string      `name:"web.listen-address" default:":9809" env:"CERTDRIFT_WEB_LISTEN_ADDRESS" help:"Addresses to serve metrics on (repeatable)."`
	WebConfigFile string        `name:"web.config.file" type:"path" placeholder:"FILE" env:"CERTDRIFT_WEB_CONFIG_FILE" help:"exporter-toolkit web configuration (TLS, client certificates, basic auth)."`
	ProbeAddress  string        `name:"web.probe-address" placeholder:"ADDR" env:"CERTDRIFT_WEB_PROBE_ADDRESS" help:"Optional plain-HTTP address serving only /-/healthy and /-/ready, for kubelet probes when the metrics port requires TLS or auth."`
	ScrapeTimeout time.Duration `name:"web.scrape-timeout" default:"10s" env:"CERTDRIFT_WEB_SCRAPE_TIMEOUT" help:"Most time one /metrics request may take."`
	MaxRequests   int           `name:"web.max-requests" default:"10" env:"CERTDRIFT_WEB_MAX_REQUESTS" help:"Most /metrics requests served at once; more get 503."`
	MaxConns      int           `name:"web.max-connections" default:"512" env:"CERTDRIFT_WEB_MAX_CONNECTIONS" help:"Most connections held open by the metrics addresses together, and by the probe address; over it the longest-idle connection is closed."`
	IdleTimeout   time.Duration `name:"web.idle-timeout" default:"15s" env:"CERTDRIFT_WEB_IDLE_TIMEOUT" help:"How long a keep-alive connection may wait for its next request."`
	HeaderTimeout time.Duration `name:"web.read-header-timeout" default:"5s" env:"CERTDRIFT_WEB_READ_HEADER_TIMEOUT" help:"How long a client may take to send its request headers (and its TLS handshake)."`
	Interval      time.Duration `default:"30s" env:"CERTDRIFT_INTERVAL" help:"Time between rounds of admin reads and handshakes."`
	Jitter        float64       `default:"0.1" env:"CERTDRIFT_JITTER" help:"Fraction of --interval by which each wait is randomly shortened or lengthened, so replicas do not probe in step."`
	RoundTimeout  time.Duration `name:"round-timeout" default:"0s" env:"CERTDRIFT_ROUND_TIMEOUT" help:"Deadline for one round; 0 means --interval."`
	Debounce      time.Duration `default:"200ms" env:"CERTDRIFT_DEBOUNCE" help:"Kubernetes mode: after a Secret, ConfigMap or pod change, wait this long for more before an early round."`
	Timeout       time.Duration `default:"0s" env:"CERTDRIFT_TIMEOUT" help:"Deadline for each admin request and each handshake; 0 uses policy.timeout."`
	Concurrency   int           `default:"8" env:"CERTDRIFT_CONCURRENCY" help:"Most admin requests, file reads and handshakes in flight at once, per view."`
	Grace         time.Duration `default:"0s" env:"CERTDRIFT_GRACE" help:"How long a rotation may take to reach Envoy before it is drift; 0 uses policy.grace."`
	Shard         int           `default:"0" env:"CERTDRIFT_SHARD" help:"This replica's shard, 0..--total-shards-1."`
	TotalShards   int           `name:"total-shards" default:"1" env:"CERTDRIFT_TOTAL_SHARDS" help:"Number of replicas splitting pods and Secrets by a stable hash of namespace/name."`

	kubeFlags      `embed:""`
	remediateFlags `embed:""`
}

func (c *serveCmd) Validate() error {
	switch {
	case c.Concurrency < 1 || c.Concurrency > 1024:
		return fmt.Errorf("--concurrency %d: want 1..1024", c.Concurrency)
	case c.Interval < 100*time.Millisecond:
		return fmt.Errorf("--interval %s: want at least 100ms", c.Interval)
	case c.Jitter < 0 || c.Jitter > 0.5:
		return fmt.Errorf("--jitter %g: want 0..0.5", c.Jitter)
	case c.RoundTimeout < 0 || c.Timeout < 0 || c.Grace < 0 || c.Debounce < 0 || c.ScrapeTimeout < 0:
		return errors.New("durations must not be negative")
	case c.MaxRequests < 1:
		return fmt.Errorf("--web.max-requests %d: want at least 1", c.MaxRequests)
	case c.MaxConns < 1:
		return fmt.Errorf("--web.max-connections %d: want at least 1", c.MaxConns)
	case c.IdleTimeout <= 0 || c.HeaderTimeout <= 0:
		return errors.New("--web.idle-timeout and --web.read-header-timeout must be positive")
	case c.TotalShards < 1:
		return fmt.Errorf("--total-shards %d: want at least 1", c.TotalShards)
	case c.Shard < 0 || c.Shard >= c.TotalShards:
		return fmt.Errorf("--shard %d: want 0..%d (--total-shards %d)", c.Shard, c.TotalShards-1, c.TotalShards)
	case len(c.ListenAddress) == 0:
		return errors.New("--web.listen-address: at least one address is needed")
	}
	if err := c.kubeFlags.validate(); err != nil {
		return err
	}
	if err := c.remediateFlags.validate(c.kubeFlags.enabled(), c.TotalShards); err != nil {
		return err
	}
	switch {
	case c.Config == "" && !c.kubeFlags.enabled():
		return errors.New("one of --config (local mode) or --kubeconfig/--in-cluster (Kubernetes mode) is required")
	}
	if c.WebConfigFile != "" {
		if err := checkWebConfigFiles(c.WebConfigFile); err != nil {
			return fmt.Errorf("--web.config.file %s: %w", c.WebConfigFile, err)
		}
		if err := web.Validate(c.WebConfigFile); err != nil {
			return fmt.Errorf("--web.config.file %s: %w", c.WebConfigFile, err)
		}
	}
	return nil
}

// exporter is one running `certdrift serve`.
type exporter struct {
	c     *serveCmd
	log   *slog.Logger
	store *collector.Store

	// Local mode: the current configuration, swapped by reloads.
	cfg atomic.Pointer[config.Config]
	// Kubernetes mode.
	kube *gather.Session
	// rem is serve --remediate (nil when off).
	rem *remediator

	trigger chan struct{}   // an early round, debounced
	desired *desiredQueue   // Secret changes for the store, between rounds
	reload  chan chan error // a reload request and where to answer
	ready   func() bool
	// admins are the local mode's admin clients, reused across rounds.
	admins envoyadmin.Transports
}

func (c *serveCmd) Run(ctx context.Context, log *slog.Logger, b buildInfo) error {
	store := collector.NewStore(collector.Options{
		Shard: collector.Shard{Index: c.Shard, Total: c.TotalShards},
		Build: collector.BuildInfo{Version: b.Version, Revision: b.Commit, GoVersion: b.GoVersion},
	})
	x := &exporter{c: c, log: log, store: store, trigger: make(chan struct{}, 1), reload: make(chan chan error),
		desired: newDesiredQueue()}
	x.ready = store.Ready

	if c.Config != "" {
		cfg, err := x.loadConfig()
		if err != nil {
			return noRun(err)
		}
		x.cfg.Store(cfg)
		store.ConfigReloaded(true, time.Now())
	}
	if c.kubeFlags.enabled() {
		if err := x.startKube(ctx); err != nil {
			return noRun(err)
		}
		defer x.kube.Close()
		var err error
		if x.rem, err = x.newRemediator(); err != nil {
			return noRun(err)
		}
	}

	// go_* and process_* (and the handler's error counter) live apart from the domain metrics.
	runtimeReg := prometheus.NewRegistry()
	runtimeReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := x.metricsHandler(store, runtimeReg)
	if err != nil {
		return noRun(fmt.Errorf("register collectors: %w", err))
	}

	listeners := make([]net.Listener, 0, len(c.ListenAddress))
	srv, limit := c.httpServer(x.handler(metrics, b))
	for _, a := range c.ListenAddress {
		l, err := net.Listen("tcp", a)
		if err != nil {
			closeAll(listeners)
			return noRun(fmt.Errorf("--web.listen-address %s: %w", a, err))
		}
		listeners = append(listeners, limit.Listener(l))
		log.Info("serving metrics", "address", l.Addr().String())
	}
	var probeSrv *http.Server
	var probeL net.Listener
	var probeLimit *connlimit.Limiter
	if c.ProbeAddress != "" {
		l, err := net.Listen("tcp", c.ProbeAddress)
		if err != nil {
			closeAll(listeners)
			return noRun(fmt.Errorf("--web.probe-address %s: %w", c.ProbeAddress, err))
		}
		log.Info("serving probes", "address", l.Addr().String())
		mux := http.NewServeMux()
		x.health(mux)
		probeSrv, probeLimit = c.httpServer(mux)
		probeL = probeLimit.Listener(l)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); x.loop(runCtx) }()
	go func() { defer wg.Done(); x.desired.run(runCtx, store) }()
	go func() { defer wg.Done(); x.signals(runCtx) }()
	x.rem.start(runCtx, &wg)

	errc := make(chan error, 2)
	webFlags := &web.FlagConfig{WebListenAddresses: &c.ListenAddress, WebSystemdSocket: new(bool), WebConfigFile: &c.WebConfigFile}
	go func() { errc <- web.ServeMultiple(listeners, srv, webFlags, log) }()
	if probeSrv != nil {
		go func() { errc <- probeSrv.Serve(probeL) }()
	}

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case serveErr = <-errc:
	}
	cancel()
	shutCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer done()
	// Silent and idle connections go now; Shutdown then waits only for requests in progress.
	limit.Close()
	probeLimit.Close()
	_ = srv.Shutdown(shutCtx)
	if probeSrv != nil {
		_ = probeSrv.Shutdown(shutCtx)
	}
	// The shutdown is bounded as a whole: a goroutine stuck where no context reaches (a read of
	// the exporter-toolkit's, a kernel call) must not keep a terminated process alive past its
	// grace period.
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-shutCtx.Done():
		log.Error("shutdown grace period over with work still running; exiting anyway")
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return noRun(fmt.Errorf("serve: %w", serveErr))
	}
	return nil
}

// httpServer is one port's server: timeouts so that silent and idle clients let go of their
// connection, and a cap so that a flood of them cannot use up the file descriptors the rounds
// need (issue 15).
func (c *serveCmd) httpServer(h http.Handler) (*http.Server, *connlimit.Limiter) {
	limit := connlimit.New(c.MaxConns)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.HeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		ConnState:         limit.ConnState,
	}, limit
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

// metricsHandler is /metrics: the collector's handler (text or protobuf, from the same
// pre-rendered rows) under a limit of concurrent scrapes and a write deadline.
func (x *exporter) metricsHandler(store *collector.Store, runtimeReg *prometheus.Registry) (http.Handler, error) {
	h, err := store.Handler(collector.HandlerOpts{
		Log:      x.log,
		Extra:    append([]prometheus.Gatherer{runtimeReg}, x.rem.gatherers()...),
		Registry: runtimeReg,
	})
	if err != nil {
		return nil, err
	}
	inFlight := make(chan struct{}, x.c.MaxRequests)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case inFlight <- struct{}{}:
			defer func() { <-inFlight }()
		default:
			http.Error(w, fmt.Sprintf("limit of %d concurrent scrapes reached", x.c.MaxRequests), http.StatusServiceUnavailable)
			return
		}
		if x.c.ScrapeTimeout > 0 {
			// A scrape is concatenation; what can take long is a client that reads slowly, which
			// must not hold one of the MaxRequests slots beyond the timeout. The deadline is the
			// connection's: cleared afterwards, or it would cut the next request on a keep-alive
			// connection (the server resets it only with a WriteTimeout, which serve does not
			// set). Not every ResponseWriter supports deadlines (tests' recorders): then none.
			rc := http.NewResponseController(w)
			if rc.SetWriteDeadline(time.Now().Add(x.c.ScrapeTimeout)) == nil {
				defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
			}
		}
		h.ServeHTTP(w, r)
	}), nil
}

// handler is the metrics port: landing page, /metrics, health, reload.
func (x *exporter) handler(metrics http.Handler, b buildInfo) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	x.health(mux)
	mux.HandleFunc("/-/reload", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			http.Error(w, "POST to reload the configuration", http.StatusMethodNotAllowed)
			return
		}
		if x.kube != nil {
			http.Error(w, "Kubernetes mode has no configuration file to reload", http.StatusBadRequest)
			return
		}
		answer := make(chan error, 1)
		select {
		case x.reload <- answer:
		case <-r.Context().Done():
			return
		}
		var err error
		select {
		case err = <-answer:
		case <-r.Context().Done():
			return // the client left, or the server is shutting down
		}
		if err != nil {
			http.Error(w, "reload failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "configuration reloaded")
	})
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        "certdrift",
		Description: "Desired, loaded and served certificates of Envoy, compared",
		Version:     b.Version,
		Links: []web.LandingLinks{
			{Address: "/metrics", Text: "Metrics"},
			{Address: "/-/ready", Text: "Readiness", Description: "200 once the first round is complete"},
			{Address: "/-/healthy", Text: "Health"},
		},
	})
	if err != nil {
		// The landing page is a template of ours: failing here is a programming error.
		x.log.Error("landing page", "err", err)
	} else {
		mux.Handle("/", landing)
	}
	return mux
}

func (x *exporter) health(mux *http.ServeMux) {
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "healthy") })
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !x.ready() {
			http.Error(w, "not ready: the first round has not completed", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
}

// signals turns SIGHUP into a reload.
func (x *exporter) signals(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if x.kube != nil {
				x.log.Info("SIGHUP ignored: Kubernetes mode has no configuration file")
				continue
			}
			answer := make(chan error, 1)
			select {
			case x.reload <- answer:
				select {
				case <-answer:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}
}

// loop runs rounds: one at once, then every interval (with jitter), early after a debounced
// change, and after every successful reload. Rounds never overlap.
func (x *exporter) loop(ctx context.Context) {
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
			case <-time.After(x.c.Debounce):
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

func (x *exporter) nextWait() time.Duration {
	j := x.c.Jitter * (2*rand.Float64() - 1)
	return time.Duration(float64(x.c.Interval) * (1 + j))
}

// loadConfig reads --config: the whole local mode, or in Kubernetes mode pairings and policy.
func (x *exporter) loadConfig() (*config.Config, error) {
	if x.c.kubeFlags.enabled() {
		return config.LoadCluster(x.c.Config)
	}
	return config.Load(x.c.Config)
}

func (x *exporter) reloadConfig() error {
	if x.c.Config == "" {
		return errors.New("no --config to reload")
	}
	cfg, err := x.loadConfig()
	now := time.Now()
	x.store.ConfigReloaded(err == nil, now)
	if err != nil {
		x.log.Error("configuration reload failed; keeping the previous one", "config", x.c.Config, "err", err)
		return err
	}
	x.cfg.Store(cfg)
	x.log.Info("configuration reloaded", "config", x.c.Config, "desired_sources", len(cfg.Desired), "envoys", len(cfg.Envoys))
	return nil
}

func (x *exporter) policy() config.Policy {
	p := config.DefaultPolicy
	if cfg := x.cfg.Load(); cfg != nil {
		p = cfg.Policy
	}
	if x.c.Timeout > 0 {
		p.Timeout = config.Duration(x.c.Timeout)
	}
	if x.c.Grace > 0 {
		p.Grace = config.Duration(x.c.Grace)
	}
	return p
}

// runRound gathers, judges and records one round. A round cut short by its deadline is still
// recorded: Gather marks what it could not observe, and the audit reports it as UNREACHABLE.
func (x *exporter) runRound(ctx context.Context) {
	timeout := x.c.RoundTimeout
	if timeout <= 0 {
		timeout = x.c.Interval
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
	policy := x.policy()
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
		in := gather.Local(rctx, cfg, gather.Fleet, gather.Options{Timeout: policy.Timeout.D(), Concurrency: x.c.Concurrency, Log: x.log, Admins: &x.admins})
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
	x.rem.offer(r)
	x.log.Info("round complete", "findings", len(r.Report.Findings), "bindings", len(r.Report.Bindings),
		"duration_seconds", r.Finished.Sub(start).Seconds())
}

// podShard is the gather.KubeOptions.Shard of --shard/--total-shards: a pod is probed by the replica
// that exposes it (collector.Shard on "namespace/pod", the Envoy's name in Kubernetes mode).
// nil with one shard: every pod.
func (c *serveCmd) podShard() func(namespace, pod string) bool {
	if c.TotalShards <= 1 {
		return nil
	}
	sh := collector.Shard{Index: c.Shard, Total: c.TotalShards}
	return func(namespace, pod string) bool { return sh.Owns(namespace + "/" + pod) }
}

// startKube starts the informers; their changes ask for an early round.
func (x *exporter) startKube(ctx context.Context) error {
	c := x.c
	poke := func() {
		select {
		case x.trigger <- struct{}{}:
		default:
		}
	}
	opts, err := c.kubeFlags.options(gather.Options{Timeout: x.policy().Timeout.D(), Concurrency: c.Concurrency, Log: x.log})
	if err != nil {
		return err
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
	opts.Shard = c.podShard()
	// Sources the pairings name are read by name when the inventory does not watch them (a
	// CA-only Opaque Secret), as audit does. Read at start: a reload that adds a pairing to a
	// source nothing mounts takes effect at the next start.
	if cfg := x.cfg.Load(); cfg != nil {
		opts.PairingSources = gather.PairingSources(cfg.Pairings)
	}
	rc, err := c.kubeFlags.restConfig()
	if err != nil {
		return err
	}
	kubeapi.RouteKlog(x.log)
	countKubeRequests(x.store)
	s, err := gather.Start(ctx, rest.CopyConfig(rc), x.policy(), opts)
	if err != nil {
		return err
	}
	x.kube = s
	return nil
}
