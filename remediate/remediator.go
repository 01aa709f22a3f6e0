package remediate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/kubeapi"
)

// BlockedWorkload is a workload on which repair is blocked, and the closed-set reason
// (exposed as collector.BlockedWorkload, which has the same fields).
type BlockedWorkload struct {
	Namespace, Workload, Reason string
}

// RemediatorConfig is what `serve --remediate` hands its Remediator. The Kubernetes session
// reaches it through Observe and OpenAdmin only, so that repair reuses the exporter's informers
// and admin transport without importing them.
type RemediatorConfig struct {
	Client *kubeapi.Client
	Policy Policy
	// DryRun plans and counts (outcome planned) but changes nothing.
	DryRun bool
	// Lease is the election's Lease; its Client is Client.
	Lease LeaseConfig
	// Observe and OpenAdmin are the post-check's and admin-quit's access to the cluster.
	Observe   Observer
	OpenAdmin AdminOpener
	// AuditPolicy is the audit's policy at the time of the round (the configuration reloads).
	AuditPolicy func() config.Policy
	Metrics     Recorder
	// SetBlocked receives, after each acted-on round, the workloads repair is blocked on.
	SetBlocked func([]BlockedWorkload)
	Log        *slog.Logger
}

// Remediator is the exporter's repair: rounds go to Continuous, which runs act in the elected
// replica only.
type Remediator struct {
	cfg  RemediatorConfig
	log  *slog.Logger
	cont *Continuous
	// healthy are the workloads the last acted-on round showed converged, so that a blocked
	// workload's Lease is read when it turns healthy, not in every round; all of them are read
	// again once per cooldown (sweptAt), which covers blocks written while this replica did not
	// lead. Only the worker goroutine touches them.
	healthy map[Workload]bool
	sweptAt time.Time
}

// NewRemediator is called after the Kubernetes session started.
func NewRemediator(cfg RemediatorConfig) *Remediator {
	r := &Remediator{cfg: cfg, log: cfg.Log.With("component", "remediate")}
	cfg.Lease.Client = cfg.Client
	r.cont = &Continuous{Lease: cfg.Lease, Act: r.act, Log: r.log}
	r.log.Info("remediate enabled", "lease", cfg.Policy.LeaseNamespace+"/"+cfg.Lease.Name, "identity", cfg.Lease.Identity,
		"dry_run", cfg.DryRun, "budget", cfg.Policy.Budget, "cooldown", cfg.Policy.Cooldown.String())
	return r
}

// ElectionIdentity is the flag's value, else POD_NAME or the host name; a random suffix keeps
// two processes on one host (or a restarted pod with its old Lease) apart.
func ElectionIdentity(flag string) (string, error) {
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

// Run runs the election until ctx ends.
func (r *Remediator) Run(ctx context.Context) error {
	if err := r.cont.Run(ctx); err != nil {
		r.log.Error("remediate stopped", "err", err)
		return err
	}
	return nil
}

// Offer hands a complete Kubernetes round to the leader's worker, unless current is false: a
// round judged while the Kubernetes source was down has the cache from before the outage as its
// desired view, and a Secret rotated meanwhile would make pods that serve the new certificate
// look stale. After an outage the informers relist with backoff, so the API server can answer
// the leader's requests seconds before the cache is current again.
func (r *Remediator) Offer(w Work, current bool) {
	if !current {
		r.log.Debug("remediate: the Kubernetes source is down; not acting on this round")
		return
	}
	r.cont.Offer(w)
}

// recover releases the blocked workloads that turned healthy since the last round (all
// healthy ones once per cooldown).
func (r *Remediator) recover(ctx context.Context, exe *Executor, rep audit.Report) {
	now := map[Workload]bool{}
	all := time.Since(r.sweptAt) >= max(r.cfg.Policy.Cooldown, time.Minute)
	if all {
		r.sweptAt = time.Now()
	}
	var check []Workload
	for _, w := range HealthyWorkloads(rep) {
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
func (r *Remediator) act(ctx context.Context, w Work) {
	c := r.cfg
	results, err := Once(ctx, OnceConfig{Client: c.Client, Policy: c.Policy, DryRun: c.DryRun,
		Observe: c.Observe, OpenAdmin: c.OpenAdmin, AuditPolicy: c.AuditPolicy(), Recover: r.recover,
		Metrics: c.Metrics, Log: r.log}, w.Report, w.Inputs)
	if err != nil {
		r.log.Warn("remediate: read the stale pods; trying again next round", "err", err)
		return
	}
	var blocked []BlockedWorkload
	for _, res := range results {
		if res.Skip == SkipBlocked {
			blocked = append(blocked, BlockedWorkload{Namespace: res.Target.Namespace, Workload: res.Target.Workload.Ref(), Reason: res.Reason})
		}
	}
	if c.SetBlocked != nil {
		c.SetBlocked(blocked)
	}
	if len(results) == 0 {
		return
	}
	counts := map[string]int{}
	for _, res := range results {
		counts[res.Outcome]++
	}
	r.log.Info("remediate round", "actions", len(results), "done", counts[OutcomeDone],
		"refused", counts[OutcomeRefused], "failed", counts[OutcomeFailed],
		"skipped", counts[OutcomeSkipped], "planned", counts[OutcomePlanned])
}
