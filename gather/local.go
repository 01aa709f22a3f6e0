package gather

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoyadmin"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/files"
	"github.com/certdrift/certdrift/probe/tlsprobe"
)

// Options bound the work of one Gather.
type Options struct {
	// Timeout bounds each Envoy's whole admin read (all its requests together) and each handshake.
	Timeout time.Duration
	// Concurrency is the most file reads, admin snapshots and handshakes in flight at once, per
	// view (the three views are gathered side by side).
	Concurrency int
	// Limits bound every certificate file read; zero means pki.DefaultLimits.
	Limits pki.Limits
	Log    *slog.Logger
	// Admins keeps one HTTP client per admin URL across rounds (serve passes its own, so that
	// connections are reused instead of left behind every round); Gather drops the clients of
	// Envoys no longer configured. nil: a pool for this Gather alone, closed when it returns.
	Admins *envoyadmin.Transports
}

// Local observes the three views described by cfg — desired files, each Envoy's admin endpoint,
// and a handshake per endpoint and SNI — and returns them as audit inputs. It never fails as a
// whole: whatever could not be observed is recorded in the inputs (Observation.Err, Snapshot
// errors, Result.Err) so that the audit reports it as a finding instead of hiding the rest.
// It is shared by `certdrift audit` and the exporter's probe loop. sc keeps one Envoy (OneEnvoy);
// every desired source is read whatever the scope, as the files have no namespace.
func Local(ctx context.Context, cfg *config.Config, sc Scope, opt Options) audit.Inputs {
	cfg = scopeConfig(cfg, sc)
	if opt.Concurrency < 1 {
		opt.Concurrency = 1
	}
	if opt.Timeout <= 0 {
		opt.Timeout = config.DefaultPolicy.Timeout.D()
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	in := audit.Inputs{Config: cfg, Envoys: make([]audit.EnvoyView, len(cfg.Envoys))}
	for i, e := range cfg.Envoys {
		in.Envoys[i].Config = e
	}

	if opt.Admins == nil {
		opt.Admins = &envoyadmin.Transports{}
		defer opt.Admins.Retain(nil)
	} else {
		var keep []string
		for _, e := range cfg.Envoys {
			keep = append(keep, e.Admin)
		}
		defer opt.Admins.Retain(keep)
	}

	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); in.Desired = readDesired(cfg.Desired, opt, log) }()
	go func() { defer wg.Done(); snapshotAdmins(ctx, cfg.Envoys, in.Envoys, opt, log) }()
	go func() { defer wg.Done(); probeEndpoints(ctx, cfg.Envoys, in.Envoys, opt, log) }()
	wg.Wait()
	return in
}

// SourceOf maps a config entry to the files probe's Source.
func SourceOf(d config.Desired) files.Source {
	s := files.Source{
		Name: d.Name, Dir: d.Dir,
		CertKey: d.Cert, KeyKey: d.Key, CAKey: d.CA,
		CertFile: d.CertFile, KeyFile: d.KeyFile, CAFile: d.CAFile,
	}
	if d.Merged != nil {
		s.Merged = &files.MergedPattern{CertSuffix: d.Merged.CertSuffix, KeySuffix: d.Merged.KeySuffix}
	}
	return s
}

func readDesired(ds []config.Desired, opt Options, log *slog.Logger) []desired.Observation {
	out := make([]desired.Observation, len(ds))
	forEach(len(ds), opt.Concurrency, func(i int) {
		out[i] = files.Read(SourceOf(ds[i]), opt.Limits)
		if err := out[i].Err; err != nil {
			log.Debug("desired source not readable (a finding)", "source", ds[i].Name, "err", err)
		} else {
			log.Debug("desired source read", "source", ds[i].Name, "items", len(out[i].Items), "data_dir", out[i].DataDir)
		}
	})
	return out
}

func snapshotAdmins(ctx context.Context, es []config.Envoy, views []audit.EnvoyView, opt Options, log *slog.Logger) {
	forEach(len(es), opt.Concurrency, func(i int) {
		e := es[i]
		if e.Admin == "" {
			return
		}
		start := time.Now()
		c, err := opt.Admins.New(e.Admin, envoyadmin.Options{Timeout: opt.Timeout})
		if err != nil {
			// Config validation already checks the URL, so this is rare; record it on every part
			// so the audit reports the gap rather than an Envoy that looks empty.
			err = fmt.Errorf("envoy %s admin %s: %w", e.Name, e.Admin, err)
			views[i].Admin = &envoystate.Snapshot{AdminURL: e.Admin, CertsErr: err, ConfigErr: err, StatsErr: err, CollectedAt: time.Now()}
			log.Debug("envoy admin client (a finding)", "envoy", e.Name, "err", err)
			return
		}
		views[i].Admin = c.Snapshot(ctx)
		log.Debug("envoy admin read", "envoy", e.Name, "admin", e.Admin,
			"contexts", len(views[i].Admin.Contexts), "secrets", len(views[i].Admin.Secrets),
			"duration_seconds", time.Since(start).Seconds())
	})
}

// probeEndpoints makes one handshake per endpoint and SNI (one without SNI when none is listed)
// and files each result under the Envoy it belongs to.
func probeEndpoints(ctx context.Context, es []config.Envoy, views []audit.EnvoyView, opt Options, log *slog.Logger) {
	var targets []tlsprobe.Target
	var owner []int
	var failed []tlsprobe.Result
	var failedOwner []int
	for i, e := range es {
		for _, ep := range e.Endpoints {
			t := tlsprobe.Target{Address: ep.Address, ALPN: ep.ALPN, Timeout: opt.Timeout}
			var certErr error
			if cc := ep.ClientCert; cc != nil {
				pair, err := loadClientCert(cc.CertFile, cc.KeyFile)
				if err != nil {
					certErr = fmt.Errorf("load client certificate %s / %s for %s: %w", cc.CertFile, cc.KeyFile, ep.Address, err)
					log.Debug("client certificate not loaded (a finding)", "envoy", e.Name, "endpoint", ep.Address, "cert_file", cc.CertFile, "err", err)
				} else {
					t.ClientCert = &pair
				}
			}
			snis := ep.SNI
			if len(snis) == 0 {
				snis = []string{""}
			}
			for _, sni := range snis {
				t := t
				t.SNI = sni
				if certErr != nil {
					// Without the client certificate an mTLS handshake would fail for a reason
					// of ours; report it as a failed handshake so the gap stays visible.
					failed = append(failed, tlsprobe.Result{Target: t, Err: certErr, Reason: "client_cert"})
					failedOwner = append(failedOwner, i)
					continue
				}
				targets = append(targets, t)
				owner = append(owner, i)
			}
		}
	}
	// ProbeAll returns results in the order of its targets, so owner[j] is the j-th result's Envoy.
	for j, r := range tlsprobe.ProbeAll(ctx, targets, opt.Concurrency) {
		i := owner[j]
		views[i].Served = append(views[i].Served, r)
		log.Debug("handshake", "envoy", es[i].Name, "address", r.Target.Address, "sni", r.Target.SNI,
			"chain", len(r.Chain), "reason", r.Reason, "duration_seconds", r.Duration.Seconds())
	}
	for j, r := range failed {
		views[failedOwner[j]].Served = append(views[failedOwner[j]].Served, r)
	}
}

// forEach runs f(0..n-1) with at most limit calls in flight.
func forEach(n, limit int, f func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}
