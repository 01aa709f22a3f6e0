package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/remediate"
)

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
	switch {
	case !kubeMode:
		return errors.New("--remediate needs Kubernetes mode (--kubeconfig or --in-cluster): outside Kubernetes use certdrift audit --reload")
	case totalShards > 1:
		// A shard sees part of the fleet; one leader among shards would leave the rest unrepaired.
		return errors.New("--remediate does not work with --total-shards > 1: run repair from an unsharded exporter or certdrift audit --reload")
	case f.RemediateLeaseName == "":
		return errors.New("--remediate-lease-name must not be empty")
	case f.RemediateLeaseDuration < 2*time.Second:
		return fmt.Errorf("--remediate-lease-duration %s: want at least 2s", f.RemediateLeaseDuration)
	}
	return f.Repair.Validate(remediate.CommandServe)
}

// remediator is the exporter's repair: rounds go to remediate.Continuous, which runs act in the
// elected replica only. nil when --remediate is off; its methods accept a nil receiver so that
// serve.go calls them unconditionally.
type remediator struct {
	f       *remediateFlags
	x       *exporter
	log     *slog.Logger
	client  *kubeapi.Client
	metrics *collector.RepairMetrics
	reg     *prometheus.Registry
	cont    *remediate.Continuous
	// healthy are the workloads the last acted-on round showed converged, so that a blocked
	// workload's Lease is read when it turns healthy, not in every round; all of them are read
	// again once per cooldown (sweptAt), which covers blocks written while this replica did not
	// lead. Only the worker goroutine touches them.
	healthy map[remediate.Workload]bool
	sweptAt time.Time
}

// newRemediator is called after the Kubernetes session started.
func (x *exporter) newRemediator() (*remediator, error) {
	f := &x.c.remediateFlags
	if !f.Remediate {
		return nil, nil
	}
	rc, err := x.c.kubeFlags.restConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubeapi.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("--remediate: kubernetes client: %w", err)
	}
	id, err := electionIdentity(f.RemediateIdentity)
	if err != nil {
		return nil, err
	}
	r := &remediator{f: f, x: x, log: x.log.With("component", "remediate"), client: client,
		metrics: newRepairMetrics(), reg: prometheus.NewRegistry()}
	if err := r.reg.Register(r.metrics); err != nil {
		return nil, fmt.Errorf("register repair metrics: %w", err)
	}
	lease := f.RemediateLeaseDuration
	r.cont = &remediate.Continuous{
		Lease: remediate.LeaseConfig{Client: client, Namespace: f.Repair.LeaseNamespace, Name: f.RemediateLeaseName,
			Identity: id, LeaseDuration: lease, RenewDeadline: lease * 2 / 3, RetryPeriod: lease / 7},
		Act: r.act,
		Log: r.log,
	}
	r.log.Info("remediate enabled", "lease", f.Repair.LeaseNamespace+"/"+f.RemediateLeaseName, "identity", id,
		"dry_run", f.RemediateDryRun, "budget", f.Repair.Budget, "cooldown", f.Repair.Cooldown.String())
	return r, nil
}

// electionIdentity is the flag's value, else POD_NAME or the host name; a random suffix keeps
// two processes on one host (or a restarted pod with its old Lease) apart.
func electionIdentity(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	base := os.Getenv("POD_NAME")
	if base == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("--remediate: host name for the election identity: %w", err)
		}
		base = h
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return base + "_" + hex.EncodeToString(b[:]), nil
}

// gatherer is the repair metrics' registry (none when off).
func (r *remediator) gatherers() []prometheus.Gatherer {
	if r == nil {
		return nil
	}
	return []prometheus.Gatherer{r.reg}
}

// start runs the election until ctx ends.
func (r *remediator) start(ctx context.Context, wg *sync.WaitGroup) {
	if r == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.cont.Run(ctx); err != nil {
			r.log.Error("remediate stopped", "err", err)
		}
	}()
}

// offer hands a recorded round to the leader's worker; rounds from local mode never get here.
// Nor do rounds judged while the Kubernetes source was down: their desired view is the cache
// from before the outage, and a Secret rotated meanwhile would make pods that serve the new
// certificate look stale. After an outage the informers relist with backoff, so the API server
// can answer the leader's requests seconds before the cache is current again.
func (r *remediator) offer(round collector.Round) {
	if r == nil || !round.Kubernetes {
		return
	}
	if !round.SourcesUp["kubernetes"] {
		r.log.Debug("remediate: the Kubernetes source is down; not acting on this round")
		return
	}
	r.cont.Offer(remediate.Work{Started: round.Started, Report: round.Report, Inputs: round.Inputs})
}

// recover releases the blocked workloads that turned healthy since the last round (all
// healthy ones once per cooldown).
func (r *remediator) recover(ctx context.Context, exe *remediate.Executor, rep audit.Report) {
	now := map[remediate.Workload]bool{}
	all := time.Since(r.sweptAt) >= max(r.f.Repair.Cooldown, time.Minute)
	if all {
		r.sweptAt = time.Now()
	}
	var check []remediate.Workload
	for _, w := range remediate.HealthyWorkloads(rep) {
		now[w] = true
		if all || !r.healthy[w] {
			check = append(check, w)
		}
	}
	r.healthy = now
	exe.RecoverBlocked(ctx, check)
}

// act is one round's repair, as `audit --reload --yes` does it: read the stale pods'
// annotations and their workloads' cooldown Leases (owners come from the round's pod context),
// plan, and carry the plan out one action at a time with the post-check observing the cluster
// through the exporter's own session.
func (r *remediator) act(ctx context.Context, w remediate.Work) {
	f := r.f
	opt := f.Repair.Options(true, time.Now())
	in, err := remediate.PrepareKube(ctx, r.client, f.Repair.LeaseNamespace, w.Report, w.Inputs, &opt)
	if err != nil {
		r.log.Warn("remediate: read the stale pods; trying again next round", "err", err)
		return
	}
	exe := &remediate.Executor{Client: r.client, Log: r.log, Metrics: r.metrics}
	f.Repair.Configure(exe)
	if !f.RemediateDryRun {
		exe.Verify = remediate.NewVerifier(observer(r.x.kube), r.x.policy(), time.Now)
		exe.OpenAdmin = openAdmin(r.x.kube)
		r.recover(ctx, exe, w.Report)
	}
	actions := remediate.Plan(w.Report, in, opt)
	results := exe.Run(ctx, actions, f.RemediateDryRun)
	var blocked []collector.BlockedWorkload
	for _, res := range results {
		if res.Skip == remediate.SkipBlocked {
			blocked = append(blocked, collector.BlockedWorkload{Namespace: res.Target.Namespace, Workload: res.Target.Workload.Ref(), Reason: res.Reason})
		}
	}
	r.metrics.SetBlocked(blocked)
	if len(results) == 0 {
		return
	}
	counts := map[string]int{}
	for _, res := range results {
		counts[res.Outcome]++
	}
	r.log.Info("remediate round", "actions", len(results), "done", counts[remediate.OutcomeDone],
		"refused", counts[remediate.OutcomeRefused], "failed", counts[remediate.OutcomeFailed],
		"skipped", counts[remediate.OutcomeSkipped], "planned", counts[remediate.OutcomePlanned])
}
