package exporter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/internal/connlimit"
)

// Web are the metrics and probe ports' settings (the --web.* flags).
type Web struct {
	ListenAddresses []string
	// ConfigFile is exporter-toolkit's web configuration (TLS, client certificates, basic auth).
	ConfigFile string
	// ProbeAddress, when set, serves only /-/healthy and /-/ready over plain HTTP.
	ProbeAddress  string
	ScrapeTimeout time.Duration
	MaxRequests   int
	MaxConns      int
	IdleTimeout   time.Duration
	HeaderTimeout time.Duration
}

// servers are the listening metrics and probe ports.
type servers struct {
	x         *Exporter
	listeners []net.Listener
	srv       *http.Server
	limit     *connlimit.Limiter
	probeSrv  *http.Server
	probeL    net.Listener
	probe     *connlimit.Limiter
}

// listen registers the collectors and opens every port.
func (x *Exporter) listen() (*servers, error) {
	w := x.opt.Web
	// go_* and process_* (and the handler's error counter) live apart from the domain metrics.
	runtimeReg := prometheus.NewRegistry()
	runtimeReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := x.metricsHandler(runtimeReg)
	if err != nil {
		return nil, fmt.Errorf("register collectors: %w", err)
	}
	s := &servers{x: x, listeners: make([]net.Listener, 0, len(w.ListenAddresses))}
	s.srv, s.limit = w.httpServer(x.handler(metrics))
	for _, a := range w.ListenAddresses {
		l, err := net.Listen("tcp", a)
		if err != nil {
			closeAll(s.listeners)
			return nil, fmt.Errorf("--web.listen-address %s: %w", a, err)
		}
		s.listeners = append(s.listeners, s.limit.Listener(l))
		x.log.Info("serving metrics", "address", l.Addr().String())
	}
	if w.ProbeAddress != "" {
		l, err := net.Listen("tcp", w.ProbeAddress)
		if err != nil {
			closeAll(s.listeners)
			return nil, fmt.Errorf("--web.probe-address %s: %w", w.ProbeAddress, err)
		}
		x.log.Info("serving probes", "address", l.Addr().String())
		mux := http.NewServeMux()
		x.health(mux)
		s.probeSrv, s.probe = w.httpServer(mux)
		s.probeL = s.probe.Listener(l)
	}
	return s, nil
}

// serve serves until ctx ends or a server fails, then stops the work in wg (cancel) and the
// servers within a grace period.
func (s *servers) serve(ctx context.Context, cancel func(), wg *sync.WaitGroup) error {
	log, w := s.x.log, s.x.opt.Web
	errc := make(chan error, 2)
	webFlags := &web.FlagConfig{WebListenAddresses: &w.ListenAddresses, WebSystemdSocket: new(bool), WebConfigFile: &w.ConfigFile}
	go func() { errc <- web.ServeMultiple(s.listeners, s.srv, webFlags, log) }()
	if s.probeSrv != nil {
		go func() { errc <- s.probeSrv.Serve(s.probeL) }()
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
	s.limit.Close()
	s.probe.Close()
	_ = s.srv.Shutdown(shutCtx)
	if s.probeSrv != nil {
		_ = s.probeSrv.Shutdown(shutCtx)
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
		return fmt.Errorf("serve: %w", serveErr)
	}
	return nil
}

// httpServer is one port's server: timeouts so that silent and idle clients let go of their
// connection, and a cap so that a flood of them cannot use up the file descriptors the rounds
// need (issue 15).
func (w Web) httpServer(h http.Handler) (*http.Server, *connlimit.Limiter) {
	limit := connlimit.New(w.MaxConns)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: w.HeaderTimeout,
		IdleTimeout:       w.IdleTimeout,
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
func (x *Exporter) metricsHandler(runtimeReg *prometheus.Registry) (http.Handler, error) {
	extra := []prometheus.Gatherer{runtimeReg}
	if x.repairReg != nil {
		extra = append(extra, x.repairReg)
	}
	h, err := x.store.Handler(collector.HandlerOpts{Log: x.log, Extra: extra, Registry: runtimeReg})
	if err != nil {
		return nil, err
	}
	w := x.opt.Web
	inFlight := make(chan struct{}, w.MaxRequests)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		select {
		case inFlight <- struct{}{}:
			defer func() { <-inFlight }()
		default:
			http.Error(rw, fmt.Sprintf("limit of %d concurrent scrapes reached", w.MaxRequests), http.StatusServiceUnavailable)
			return
		}
		if w.ScrapeTimeout > 0 {
			// A scrape is concatenation; what can take long is a client that reads slowly, which
			// must not hold one of the MaxRequests slots beyond the timeout. The deadline is the
			// connection's: cleared afterwards, or it would cut the next request on a keep-alive
			// connection (the server resets it only with a WriteTimeout, which serve does not
			// set). Not every ResponseWriter supports deadlines (tests' recorders): then none.
			rc := http.NewResponseController(rw)
			if rc.SetWriteDeadline(time.Now().Add(w.ScrapeTimeout)) == nil {
				defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
			}
		}
		h.ServeHTTP(rw, r)
	}), nil
}

// handler is the metrics port: landing page, /metrics, health, reload.
func (x *Exporter) handler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	x.health(mux)
	mux.HandleFunc("/-/reload", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			http.Error(w, "POST to reload the configuration", http.StatusMethodNotAllowed)
			return
		}
		if x.opt.Kubernetes {
			http.Error(w, "Kubernetes mode has no configuration file to reload", http.StatusBadRequest)
			return
		}
		err := x.Reload(r.Context())
		if r.Context().Err() != nil {
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
		Version:     x.opt.Build.Version,
		// The toolkit links pprof pages unless told otherwise; certdrift does not serve them.
		Profiling: "false",
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

func (x *Exporter) health(mux *http.ServeMux) {
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "healthy") })
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !x.store.Ready() {
			http.Error(w, "not ready: the first round has not completed", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
}
