package gather

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/audit/bind"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoyadmin"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/adminaccess"
	"github.com/certdrift/certdrift/probe/kube/certmanager"
	"github.com/certdrift/certdrift/probe/kube/discovery"
	"github.com/certdrift/certdrift/probe/kube/inventory"
	"github.com/certdrift/certdrift/ref"
)

// KubeOptions bound a Session.
type KubeOptions struct {
	Namespaces []string
	// Selectors and Presets narrow Envoy discovery (discovery.Options).
	Selectors   []string
	Presets     []kube.Preset
	AdminMode   adminaccess.Mode
	SyncTimeout time.Duration
	// The inventory's server-side filters (inventory.Options): excluded namespaces, Secret types,
	// Opaque layouts, label selectors, CA-bundle ConfigMaps.
	ExcludeNamespaces []string
	SecretTypes       []string
	Layouts           []inventory.Layout
	SecretSelector    string
	ConfigMapSelector string
	ConfigMapNames    []string
	// QPS and Burst bound each client's request rate (0: the kube package's defaults).
	QPS   float32
	Burst int
	// OnDesiredChange is called (on an informer goroutine: quick, non-blocking) after a Secret
	// or ConfigMap summary changes, and OnTargetChange after an Envoy pod does; the exporter
	// uses them to refresh without waiting for its next round.
	OnDesiredChange func(kube.Change)
	OnTargetChange  func(op kube.ChangeOp, namespace, pod string)
	// OnCertManagerChange is called (the same way) after a Certificate's or CertificateRequest's
	// projection changes, kind "Certificate" or "CertificateRequest", and with an empty kind when
	// cert-manager's CRDs appear or go (certmanager.Options.OnChange).
	OnCertManagerChange func(op kube.ChangeOp, kind, namespace, name string)
	// PairingSources are the sources that declared pairings name ("namespace/name",
	// "configmap:namespace/name"): read by name when the informers do not watch them.
	PairingSources []string
	// AdminIdleTimeout and AdminMaxSessions bound the port-forward sessions kept between rounds
	// (adminaccess.Options IdleTimeout and MaxSessions). Defaults: DefaultAdminIdleTimeout, longer
	// than serve's default interval so that a session outlives the gap to the next round, and
	// DefaultAdminMaxSessions, a session per pod for fleets that size (issue 20: setting up a
	// session per pod per round made port-forward rounds twice as long as direct ones).
	AdminIdleTimeout time.Duration
	AdminMaxSessions int
	// Shard, when set, keeps only the Envoy pods it returns true for: the others are neither
	// read over admin nor handshaken. The exporter's --shard/--total-shards sets it, so that N
	// replicas split the probing, the judging and not only the exposition. Of the desired view a
	// fleet round keeps the sources Shard owns (the same hash on "namespace/name") and those its
	// pods need: a pod of this shard may mount a Secret of another (shardSources). The inventory
	// still lists every Secret, but parses and keeps the certificates of the shard's own only
	// (inventory.Options.Full); the others a round judges are read by name (Promote).
	Shard func(namespace, name string) bool
	// NoCertManager turns off reading cert-manager's Certificates and CertificateRequests
	// (gather/certmanager.go); absent CRDs need no flag, they are not an error.
	NoCertManager bool
	Options

	// oneRound is KubeOnce's: the cert-manager reader lists in the round instead of starting a
	// watch that would outlive it (a one-shot audit pays exactly the list, as before the watch).
	oneRound bool
}

// Defaults of KubeOptions' port-forward session bounds.
const (
	DefaultAdminIdleTimeout = 2 * time.Minute
	DefaultAdminMaxSessions = 256
)

// Session holds the informers of the Kubernetes mode: the Secret/ConfigMap inventory and
// Envoy discovery stay current between rounds, so a one-shot audit lists once and the exporter
// keeps watching. Start it with Start, take rounds with Gather, stop it with Close.
type Session struct {
	inv    *inventory.Inventory
	disc   *discovery.Discovery
	dialer *adminaccess.Dialer
	// memo keeps each pod's parsed admin answers between rounds (envoyadmin.Memo).
	memo   envoyadmin.Memo
	cm     *certmanager.Reader // nil: not read
	policy config.Policy
	opt    KubeOptions
	// verdicts carries the audit's clean verdicts on unchanged desired certificates from round to
	// round (audit.Memo): a serve round with no Secret changed skips their signature checks.
	verdicts *audit.Memo
	// facts keeps each desired certificate's facts between rounds (kube.FactsCache), so that a
	// round parses only the certificates of Secrets that changed.
	facts *kube.FactsCache
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// Start starts the informers and waits (up to SyncTimeout) for their initial lists. It fails
// only when the cluster cannot be read at all (bad config, RBAC, API server down).
func Start(ctx context.Context, rc *rest.Config, policy config.Policy, opt KubeOptions) (*Session, error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Concurrency < 1 {
		opt.Concurrency = 1
	}
	if opt.Timeout <= 0 {
		opt.Timeout = policy.Timeout.D()
	}
	if opt.SyncTimeout <= 0 {
		opt.SyncTimeout = 30 * time.Second
	}
	log := opt.Log
	inv, err := inventory.New(rc, opt.InventoryOptions())
	if err != nil {
		return nil, err
	}
	disc, err := discovery.New(rc, discovery.Options{Namespaces: opt.Namespaces, ExcludeNamespaces: opt.ExcludeNamespaces,
		Selectors: opt.Selectors, Presets: opt.Presets, QPS: opt.QPS, Burst: opt.Burst, Logger: log, OnChange: opt.OnTargetChange})
	if err != nil {
		return nil, err
	}
	if opt.AdminIdleTimeout <= 0 {
		opt.AdminIdleTimeout = DefaultAdminIdleTimeout
	}
	if opt.AdminMaxSessions <= 0 {
		opt.AdminMaxSessions = DefaultAdminMaxSessions
	}
	dialer, err := adminaccess.New(rc, adminaccess.Options{Mode: opt.AdminMode, Logger: log,
		IdleTimeout: opt.AdminIdleTimeout, MaxSessions: opt.AdminMaxSessions})
	if err != nil {
		return nil, err
	}
	cm, err := newCertManager(rc, opt)
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &Session{inv: inv, disc: disc, dialer: dialer, cm: cm, policy: policy, opt: opt, stop: stop, verdicts: audit.NewMemo(), facts: kube.NewFactsCache()}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); _ = inv.Run(runCtx) }()
	go func() { defer s.wg.Done(); _ = disc.Run(runCtx) }()

	syncCtx, cancel := context.WithTimeout(ctx, opt.SyncTimeout)
	err = errors.Join(inv.WaitSynced(syncCtx), disc.WaitSynced(syncCtx))
	cancel()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("read the cluster: %w", err)
	}
	if cm != nil && !opt.oneRound {
		// After the inventory's list, not beside it: the two initial lists are the process's
		// peak memory, and overlapping them raised serve's RSS (docs/benchmarks.md). Not waited
		// for: the first round's read waits for it (at most SyncTimeout), and absent CRDs must
		// not hold up the start.
		done, err := cm.Start(runCtx)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.wg.Go(func() { <-done })
	}
	return s, nil
}

// InventoryOptions are the inventory.Options these KubeOptions ask for.
func (opt KubeOptions) InventoryOptions() inventory.Options {
	return inventory.Options{
		Namespaces: opt.Namespaces, ExcludeNamespaces: opt.ExcludeNamespaces,
		SecretTypes: opt.SecretTypes, Layouts: opt.Layouts, SecretSelector: opt.SecretSelector,
		ConfigMapSelector: opt.ConfigMapSelector, ConfigMapNames: opt.ConfigMapNames,
		QPS: opt.QPS, Burst: opt.Burst, Logger: opt.Log, OnChange: opt.OnDesiredChange,
		Full: opt.Shard,
	}
}

// Close stops the informers and closes port-forward sessions; nothing of the session outlives it.
func (s *Session) Close() {
	s.stop()
	s.wg.Wait()
	s.dialer.Close()
}

// Inventory and Discovery expose the informers, for health and metrics.
func (s *Session) Inventory() *inventory.Inventory { return s.inv }

// AdminSessions is how many port-forward sessions to Envoy admins are open, kept for the next
// round.
func (s *Session) AdminSessions() int              { return s.dialer.Sessions() }
func (s *Session) Discovery() *discovery.Discovery { return s.disc }

// OpenAdmin reaches a discovered pod's Envoy admin the way rounds do (pod IP or port-forward);
// the caller closes the connection.
func (s *Session) OpenAdmin(ctx context.Context, namespace, pod string) (*adminaccess.Conn, error) {
	for _, t := range s.disc.Targets(ctx).Targets {
		if t.Namespace == namespace && t.Pod == pod {
			return s.dialer.Open(ctx, t)
		}
	}
	return nil, fmt.Errorf("pod %s/%s is not a discovered Envoy", namespace, pod)
}

// KubeOnce is one audit's worth of a Session: start, one round, close.
func KubeOnce(ctx context.Context, rc *rest.Config, policy config.Policy, opt KubeOptions) (audit.Inputs, error) {
	if opt.AdminMaxSessions <= 0 {
		// No next round to keep sessions for: a few at a time, each closed for the next pod.
		opt.AdminMaxSessions = adminaccess.DefaultAdminMaxSessions
	}
	opt.oneRound = true
	s, err := Start(ctx, rc, policy, opt)
	if err != nil {
		return audit.Inputs{}, err
	}
	defer s.Close()
	in := s.Gather(ctx, Fleet)
	in.Memo = nil // one round: nothing to carry over, and no verdicts to keep in memory
	return in, nil
}

// Gather observes the three views in the cluster as they are now: Secrets from the inventory
// (desired), every discovered Envoy pod's admin (loaded, directly or through port-forward) and a
// handshake per pod IP, TLS port and SNI (served), with bindings from each pod's spec. Secrets
// and ConfigMaps that pods mount or name (or that pairings name) but the informers do not watch
// are read by name (inventory.Inventory.Fetch): a trust bundle in an Opaque Secret or a ConfigMap is
// desired too. Handshakes do not depend on the admin: without it the ports come from the pod
// spec. Like Local it records what could not be observed in the inputs instead of failing. sc
// narrows the round (see Scope); the shard (KubeOptions.Shard) applies within it.
func (s *Session) Gather(ctx context.Context, sc Scope) audit.Inputs {
	opt, log := s.opt, s.opt.Log
	inv := s.inv.Snapshot()
	snap := s.disc.Targets(ctx)
	live := make([]string, len(snap.Targets))
	for i, t := range snap.Targets {
		live[i] = t.Key()
	}
	s.memo.Retain(live) // every discovered pod, so that a narrower scope keeps the others' entries
	discovered := snap.Targets
	snap.Targets = scopeTargets(shardTargets(snap.Targets, opt.Shard), sc)
	for _, e := range snap.Errors {
		log.Warn("envoy discovery", "source", e.Source, "err", e.Err)
	}

	admins := make([]*envoystate.Snapshot, len(snap.Targets))
	forEach(len(snap.Targets), opt.Concurrency, func(i int) {
		t := snap.Targets[i]
		for _, e := range t.AnnotationErrors {
			log.Warn("envoy pod annotation", "envoy", t.Key(), "err", e)
		}
		if t.AdminPort > 0 {
			admins[i] = snapshotPod(ctx, s.dialer, &s.memo, t, opt.Timeout, log)
		}
	})
	// Port-forward sessions stay open for the next round (AdminIdleTimeout closes the unused).

	cm := s.readCertManager(ctx, sc)
	refs := referencedRefs(snap.Targets, admins, opt.PairingSources)
	if opt.Shard != nil && !sc.narrowed() {
		refs = append(refs, ownedMountedRefs(discovered, opt.Shard, refs)...)
	}
	if opt.Shard != nil {
		// The inventory holds stubs of the Secrets this shard does not own: read those the
		// round judges (shardSources, scopeDesired) before narrowing to them.
		inv = s.inv.Promote(ctx, inv, promoteNamespaces(snap.Targets, sc), refs, !sc.narrowed())
	}
	if judged := shardSources(opt.Shard, snap.Targets, refs); judged != nil && !sc.narrowed() {
		inv = keepDesired(inv, judged)
		cm = shardCertManager(cm, judged)
	}
	refs = withCertManagerSecrets(refs, cm)
	inv = scopeDesired(inv, sc, refs)
	log.Debug("cluster read", "secret_sources", len(inv.Secrets)+len(inv.ConfigMaps), "envoys", len(snap.Targets))
	extra := s.inv.Fetch(ctx, unwatchedRefs(inv, refs))
	if n := len(extra.Secrets) + len(extra.ConfigMaps); n > 0 {
		log.Debug("mounted sources read by name", "sources", n)
	}
	// Unparsed (desired.Lazy): a round parses only what changed or what a check needs.
	s.facts.Round()
	desired := slices.Concat(inv.LazyObservations(s.facts), extra.LazyObservations(s.facts))
	keys := bind.KeysOf(inv, extra)
	leaves := bind.DesiredNames(desired)
	lookup := bind.Lookup(desired)
	envoys := make([]config.Envoy, len(snap.Targets))
	views := make([]audit.EnvoyView, len(snap.Targets))
	for i, t := range snap.Targets {
		p := bind.Pod(t, admins[i], keys, lookup, leaves)
		for _, tb := range p.Trust {
			log.Debug("envoy trust bundle", "envoy", t.Key(), "sds_secret", tb.Secret, "source", tb.Source, "missing", tb.Missing)
		}
		envoys[i] = p.Envoy
		views[i] = audit.EnvoyView{Config: p.Envoy, Admin: admins[i], Pod: podContext(t, p.Risks)}
	}
	probeEndpoints(ctx, envoys, views, opt.Options, log)
	return audit.Inputs{Config: &config.Config{Envoys: envoys, Policy: s.policy}, Desired: desired, Envoys: views, CertManager: cm, Memo: s.verdicts}
}

// referencedRefs are the Secrets and ConfigMaps that the pods mount or name (spec, annotation,
// SDS names) or that pairings name, each once.
func referencedRefs(targets []kube.EnvoyTarget, admins []*envoystate.Snapshot, pairingSources []string) []ref.Source {
	var out []ref.Source
	seen := map[ref.Source]bool{}
	add := func(r ref.Source) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for i, t := range targets {
		for _, r := range slices.Concat(kube.MountedRefs(t), bind.SDSRefs(t, admins[i])) {
			add(r)
		}
	}
	for _, src := range pairingSources {
		if r, ok := ref.ParseKube(src); ok && r.Valid() {
			add(r)
		}
	}
	return out
}

// ownedMountedRefs are the sources that the shard owns (keep) and that pods of any shard mount
// or declare, minus have. The collector exposes a source with the shard that owns it (its
// certificates, its own findings: a CA bundle's hygiene, a parse error), but a source the
// informers do not watch is read by name only for the pods that reference it, and those may all
// belong to other shards; the owner reads it too, from the pods' specs, which every replica
// discovers. (A source named only over SDS is known only to its pod's replica, from that Envoy's
// admin.)
func ownedMountedRefs(targets []kube.EnvoyTarget, keep func(namespace, name string) bool, have []ref.Source) []ref.Source {
	seen := refSet(have)
	var out []ref.Source
	for _, t := range targets {
		for _, r := range kube.MountedRefs(t) {
			if !seen[r] && keep(r.Namespace, r.Name) {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// unwatchedRefs are the refs that the inventory's snapshot does not hold.
func unwatchedRefs(inv kube.Snapshot, refs []ref.Source) []ref.Source {
	have := make(map[ref.Source]bool, len(inv.Secrets)+len(inv.ConfigMaps))
	for _, s := range inv.Secrets {
		have[ref.Source{Kind: "Secret", Namespace: s.Namespace, Name: s.Name}] = true
	}
	for _, c := range inv.ConfigMaps {
		have[ref.Source{Kind: "ConfigMap", Namespace: c.Namespace, Name: c.Name}] = true
	}
	var out []ref.Source
	for _, r := range refs {
		if !have[r] {
			out = append(out, r)
		}
	}
	return out
}

// shardTargets keeps the targets keep owns, all of them when keep is nil.
func shardTargets(ts []kube.EnvoyTarget, keep func(namespace, pod string) bool) []kube.EnvoyTarget {
	if keep == nil {
		return ts
	}
	out := make([]kube.EnvoyTarget, 0, len(ts))
	for _, t := range ts {
		if keep(t.Namespace, t.Pod) {
			out = append(out, t)
		}
	}
	return out
}

// podContext is what the audit needs of a pod beyond its views.
func podContext(t kube.EnvoyTarget, risks []bind.MountRisk) *audit.PodContext {
	pc := &audit.PodContext{Namespace: t.Namespace, Pod: t.Pod, StartedAt: t.StartTime, NoHotReload: t.NoHotReload}
	pc.Workload = t.Workload().String()
	for _, c := range t.Containers {
		if c.Name == t.EnvoyContainer && !c.StartedAt.IsZero() {
			pc.StartedAt = c.StartedAt
		}
	}
	for _, r := range risks {
		pc.Risks = append(pc.Risks, audit.MountRisk{Container: r.Container, MountPath: r.MountPath, SubPath: r.SubPath,
			Source: r.Source, Reason: r.Reason})
	}
	return pc
}

// snapshotPod reads one pod's admin; a failure is recorded on every part of the snapshot, so the
// audit reports the pod as unreachable instead of as an Envoy holding nothing.
func snapshotPod(ctx context.Context, d *adminaccess.Dialer, memo *envoyadmin.Memo, t kube.EnvoyTarget, timeout time.Duration, log *slog.Logger) *envoystate.Snapshot {
	failed := func(url string, err error) *envoystate.Snapshot {
		log.Debug("envoy admin not read (a finding)", "envoy", t.Key(), "err", err)
		return &envoystate.Snapshot{AdminURL: url, CertsErr: err, ConfigErr: err, StatsErr: err, CollectedAt: time.Now()}
	}
	conn, err := d.Open(ctx, t)
	if err != nil {
		return failed(fmt.Sprintf("pod %s admin port %d", t.Key(), t.AdminPort), err)
	}
	defer conn.Close()
	// The memo is keyed by pod: a port-forward's local URL changes with its session.
	c, err := envoyadmin.New(conn.BaseURL, envoyadmin.Options{HTTPClient: conn.HTTPClient, Timeout: timeout, Memo: memo, MemoKey: t.Key()})
	if err != nil {
		return failed(conn.BaseURL, fmt.Errorf("envoy %s admin %s: %w", t.Key(), conn.BaseURL, err))
	}
	start := time.Now()
	s := c.Snapshot(ctx)
	log.Debug("envoy admin read", "envoy", t.Key(), "admin", conn.BaseURL, "route", conn.Route,
		"contexts", len(s.Contexts), "secrets", len(s.Secrets), "duration_seconds", time.Since(start).Seconds())
	return s
}

// PairingSources are the sources named by pairings, each once.
func PairingSources(ps []config.Pairing) []string {
	var out []string
	for _, p := range ps {
		for _, src := range []string{p.Bundle.Source, p.Leaf.Source} {
			if src != "" && !slices.Contains(out, src) {
				out = append(out, src)
			}
		}
	}
	return out
}
