package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoyadmin"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/files"
	"github.com/certdrift/certdrift/probe/kube"
)

// maxFallbackSNIs bounds the SNIs taken from a desired certificate's DNS names when neither the
// pod nor Envoy's listeners name any: a certificate may carry hundreds.
const maxFallbackSNIs = 8

// kubeRestConfig loads the client configuration from a kubeconfig file and optional context.
func kubeRestConfig(path, kctx string) (*rest.Config, error) {
	// client-go reads the file with os.ReadFile: checked first through boundedfile so that a FIFO
	// or a device named by --kubeconfig fails at once instead of hanging (see checkKubeconfig).
	if err := checkKubeconfig(path); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kctx}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s (context %q): %w", path, kctx, err)
	}
	return cfg, nil
}

// KubeOptions bound a KubeSession.
type KubeOptions struct {
	Namespaces []string
	// Selectors and Presets narrow Envoy discovery (kube.DiscoveryOptions).
	Selectors   []string
	Presets     []kube.Preset
	AdminMode   kube.AdminMode
	SyncTimeout time.Duration
	// The inventory's server-side filters (kube.Options): excluded namespaces, Secret types,
	// Opaque layouts, label selectors, CA-bundle ConfigMaps.
	ExcludeNamespaces []string
	SecretTypes       []string
	Layouts           []kube.Layout
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
	// PairingSources are the sources that declared pairings name ("namespace/name",
	// "configmap:namespace/name"): read by name when the informers do not watch them.
	PairingSources []string
	// Shard, when set, keeps only the Envoy pods it returns true for: the others are neither
	// read over admin nor handshaken. The exporter's --shard/--total-shards sets it, so that N
	// replicas split the probing and not only the exposition. Every Secret stays in the desired
	// view: a pod of this shard may mount a Secret of another.
	Shard func(namespace, pod string) bool
	GatherOptions
}

// KubeSession holds the informers of the Kubernetes mode: the Secret/ConfigMap inventory and
// Envoy discovery stay current between rounds, so a one-shot audit lists once and the exporter
// keeps watching. Start it with StartKube, take rounds with Gather, stop it with Close.
type KubeSession struct {
	inv    *kube.Inventory
	disc   *kube.Discovery
	dialer *kube.AdminDialer
	policy config.Policy
	opt    KubeOptions
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// StartKube starts the informers and waits (up to SyncTimeout) for their initial lists. It fails
// only when the cluster cannot be read at all (bad config, RBAC, API server down).
func StartKube(ctx context.Context, rc *rest.Config, policy config.Policy, opt KubeOptions) (*KubeSession, error) {
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
	inv, err := kube.New(rc, opt.inventoryOptions())
	if err != nil {
		return nil, err
	}
	disc, err := kube.NewDiscovery(rc, kube.DiscoveryOptions{Namespaces: opt.Namespaces, ExcludeNamespaces: opt.ExcludeNamespaces,
		Selectors: opt.Selectors, Presets: opt.Presets, QPS: opt.QPS, Burst: opt.Burst, Logger: log, OnChange: opt.OnTargetChange})
	if err != nil {
		return nil, err
	}
	dialer, err := kube.NewAdminDialer(rc, kube.AdminAccessOptions{Mode: opt.AdminMode, Logger: log})
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &KubeSession{inv: inv, disc: disc, dialer: dialer, policy: policy, opt: opt, stop: stop}
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
	return s, nil
}

// inventoryOptions are the kube.Options these KubeOptions ask for.
func (opt KubeOptions) inventoryOptions() kube.Options {
	return kube.Options{
		Namespaces: opt.Namespaces, ExcludeNamespaces: opt.ExcludeNamespaces,
		SecretTypes: opt.SecretTypes, Layouts: opt.Layouts, SecretSelector: opt.SecretSelector,
		ConfigMapSelector: opt.ConfigMapSelector, ConfigMapNames: opt.ConfigMapNames,
		QPS: opt.QPS, Burst: opt.Burst, Logger: opt.Log, OnChange: opt.OnDesiredChange,
	}
}

// Close stops the informers and closes port-forward sessions; nothing of the session outlives it.
func (s *KubeSession) Close() {
	s.stop()
	s.wg.Wait()
	s.dialer.Close()
}

// Inventory and Discovery expose the informers, for health and metrics.
func (s *KubeSession) Inventory() *kube.Inventory { return s.inv }
func (s *KubeSession) Discovery() *kube.Discovery { return s.disc }

// GatherKube is one audit's worth of a KubeSession: start, one round, close.
func GatherKube(ctx context.Context, rc *rest.Config, policy config.Policy, opt KubeOptions) (audit.Inputs, error) {
	s, err := StartKube(ctx, rc, policy, opt)
	if err != nil {
		return audit.Inputs{}, err
	}
	defer s.Close()
	return s.Gather(ctx), nil
}

// Gather observes the three views in the cluster as they are now: Secrets from the inventory
// (desired), every discovered Envoy pod's admin (loaded, directly or through port-forward) and a
// handshake per pod IP, TLS port and SNI (served), with bindings from each pod's spec. Secrets
// and ConfigMaps that pods mount or name (or that pairings name) but the informers do not watch
// are read by name (kube.Inventory.Fetch): a trust bundle in an Opaque Secret or a ConfigMap is
// desired too. Handshakes do not depend on the admin: without it the ports come from the pod
// spec. Like the local Gather it records what could not be observed in the inputs instead of
// failing.
func (s *KubeSession) Gather(ctx context.Context) audit.Inputs {
	opt, log := s.opt, s.opt.Log
	inv := s.inv.Snapshot()
	snap := s.disc.Targets(ctx)
	snap.Targets = shardTargets(snap.Targets, opt.Shard)
	for _, e := range snap.Errors {
		log.Warn("envoy discovery", "source", e.Source, "err", e.Err)
	}
	log.Info("cluster read", "secret_sources", len(inv.Secrets)+len(inv.ConfigMaps), "envoys", len(snap.Targets))

	admins := make([]*envoystate.Snapshot, len(snap.Targets))
	forEach(len(snap.Targets), opt.Concurrency, func(i int) {
		t := snap.Targets[i]
		for _, e := range t.AnnotationErrors {
			log.Warn("envoy pod annotation", "envoy", t.Key(), "err", e)
		}
		if t.AdminPort > 0 {
			admins[i] = snapshotPod(ctx, s.dialer, t, opt.Timeout, log)
		}
	})
	s.dialer.CloseIdle()

	extra := s.inv.Fetch(ctx, unwatchedRefs(inv, snap.Targets, admins, opt.PairingSources))
	if n := len(extra.Secrets) + len(extra.ConfigMaps); n > 0 {
		log.Debug("mounted sources read by name", "sources", n)
	}
	desired := slices.Concat(inv.Observations(), extra.Observations())
	keys := kube.KeysOf(inv, extra)
	leaves := desiredNames(desired)
	lookup := secretLookup(desired)
	envoys := make([]config.Envoy, len(snap.Targets))
	views := make([]audit.EnvoyView, len(snap.Targets))
	for i, t := range snap.Targets {
		pb := kube.Bind(t, keys)
		e := pb.Envoy
		admin := admins[i]
		if admin != nil {
			e.Admin = admin.AdminURL
			// What Envoy reports loading comes first: the audit keeps the first path it is given
			// for a Secret, and the reported path is the one /certs and the listeners name. SDS
			// names (Istio kubernetes://, Envoy Gateway ns/name) come next, the spec, then the
			// trust bundles SDS names resolve to (Istio -cacert), last.
			sds, trust := kube.SDSBindings(t, admin, lookup)
			var trustBindings []config.Binding
			for _, tb := range trust {
				log.Debug("envoy trust bundle", "envoy", t.Key(), "sds_secret", tb.Secret, "source", tb.Source, "missing", tb.Missing)
				trustBindings = append(trustBindings, tb.Binding(t))
			}
			e.Bindings = slices.Concat(kube.LoadedBindings(t, keys, admin), sds, e.Bindings, trustBindings)
		}
		e.Endpoints = kube.ProbeEndpoints(t, admin)
		fillSNIs(e.Endpoints, e.Bindings, leaves)
		envoys[i] = e
		views[i] = audit.EnvoyView{Config: e, Admin: admin, Pod: podContext(t, pb.Risks)}
	}
	probeEndpoints(ctx, envoys, views, opt.GatherOptions, log)
	return audit.Inputs{Config: &config.Config{Envoys: envoys, Policy: s.policy}, Desired: desired, Envoys: views}
}

// unwatchedRefs are the Secrets and ConfigMaps that the pods mount or name (spec, annotation, SDS
// names) or that pairings name, and that the inventory's snapshot does not hold.
func unwatchedRefs(inv kube.Snapshot, targets []kube.EnvoyTarget, admins []*envoystate.Snapshot, pairingSources []string) []kube.SourceRef {
	have := make(map[string]bool, len(inv.Secrets)+len(inv.ConfigMaps))
	for _, s := range inv.Secrets {
		have[kube.SecretSourceName(s.Namespace, s.Name)] = true
	}
	for _, c := range inv.ConfigMaps {
		have[kube.ConfigMapSourceName(c.Namespace, c.Name)] = true
	}
	var out []kube.SourceRef
	add := func(r kube.SourceRef) {
		if src := r.Source(); !have[src] {
			have[src] = true
			out = append(out, r)
		}
	}
	for i, t := range targets {
		for _, r := range slices.Concat(kube.MountedRefs(t), kube.SDSRefs(t, admins[i])) {
			add(r)
		}
	}
	for _, src := range pairingSources {
		if r, ok := kube.ParseSourceName(src); ok {
			add(r)
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
func podContext(t kube.EnvoyTarget, risks []kube.MountRisk) *audit.PodContext {
	pc := &audit.PodContext{Namespace: t.Namespace, Pod: t.Pod, StartedAt: t.StartTime, NoHotReload: t.NoHotReload}
	if t.Owner.Kind != "" {
		pc.Workload = t.Owner.Kind + "/" + t.Owner.Name
	}
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
func snapshotPod(ctx context.Context, d *kube.AdminDialer, t kube.EnvoyTarget, timeout time.Duration, log *slog.Logger) *envoystate.Snapshot {
	failed := func(url string, err error) *envoystate.Snapshot {
		log.Warn("envoy admin", "envoy", t.Key(), "err", err)
		return &envoystate.Snapshot{AdminURL: url, CertsErr: err, ConfigErr: err, StatsErr: err, CollectedAt: time.Now()}
	}
	conn, err := d.Open(ctx, t)
	if err != nil {
		return failed(fmt.Sprintf("pod %s admin port %d", t.Key(), t.AdminPort), err)
	}
	defer conn.Close()
	c, err := envoyadmin.New(conn.BaseURL, envoyadmin.Options{HTTPClient: conn.HTTPClient, Timeout: timeout})
	if err != nil {
		return failed(conn.BaseURL, fmt.Errorf("envoy %s admin %s: %w", t.Key(), conn.BaseURL, err))
	}
	start := time.Now()
	s := c.Snapshot(ctx)
	log.Debug("envoy admin read", "envoy", t.Key(), "admin", conn.BaseURL, "route", conn.Route,
		"contexts", len(s.Contexts), "secrets", len(s.Secrets), "duration_seconds", time.Since(start).Seconds())
	return s
}

// secretLookup answers whether the desired view holds a Secret and whether it carries a CA
// bundle, for resolving SDS names (Istio's -cacert rule needs the latter).
func secretLookup(obs []files.Observation) kube.SecretLookup {
	type info struct{ hasCA bool }
	m := make(map[string]info, len(obs))
	for _, o := range obs {
		if strings.HasPrefix(o.Source.Name, "configmap:") {
			continue
		}
		i := m[o.Source.Name]
		for _, it := range o.Items {
			i.hasCA = i.hasCA || len(it.CA) > 0
		}
		m[o.Source.Name] = i
	}
	return func(source string) (bool, bool) {
		i, ok := m[source]
		return ok, i.hasCA
	}
}

// desiredNames are the exact DNS names of each desired source's certificates, by source name.
func desiredNames(obs []files.Observation) map[string][]string {
	out := map[string][]string{}
	for _, o := range obs {
		for _, it := range o.Items {
			if len(it.Chain) == 0 {
				continue
			}
			for _, n := range it.Chain[0].DNSNames {
				if !strings.HasPrefix(n, "*") {
					out[o.Source.Name] = append(out[o.Source.Name], n)
				}
			}
		}
	}
	return out
}

// pairingSources are the sources named by pairings, each once.
func pairingSources(ps []config.Pairing) []string {
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

// fillSNIs gives an endpoint with no SNI the DNS names of the certificates bound to its pod
// (issue 4: listener server_names, else the desired certificate's DNS SANs, else none). A trust
// binding (a CA bundle and no certificate) says nothing about what the pod serves.
func fillSNIs(eps []config.Endpoint, bs []config.Binding, names map[string][]string) {
	var snis []string
	for _, b := range bs {
		if b.File == "" && b.CAFile != "" {
			continue
		}
		for _, n := range names[b.Source] {
			if len(snis) < maxFallbackSNIs && !contains(snis, n) {
				snis = append(snis, n)
			}
		}
	}
	for i := range eps {
		if len(eps[i].SNI) == 0 {
			eps[i].SNI = snis
		}
	}
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// runKube is `certdrift audit --kubeconfig`: the cluster is the configuration.
func (c *auditCmd) runKube(ctx context.Context, io *streams, log *slog.Logger) error {
	failOn, ok := audit.ParseSeverity(c.FailOn)
	if !ok {
		return noRun(fmt.Errorf("--fail-on %q: want info, warning or critical", c.FailOn))
	}
	// The cluster supplies the desired certificates and the Envoys; a config file adds only peer
	// pairings and policy.
	cfg := &config.Config{Policy: config.DefaultPolicy}
	if c.Config != "" {
		var err error
		if cfg, err = config.LoadCluster(c.Config); err != nil {
			if c.ConfigCheck {
				fmt.Fprintf(io.Err, "config invalid:\n%s\n", indent(err.Error()))
				return &exitError{code: exitNoRun, err: err, silent: true}
			}
			return noRun(err)
		}
		if c.ConfigCheck {
			_, werr := fmt.Fprintf(io.Out, "config OK (Kubernetes mode): %d pairings\n", len(cfg.Pairings))
			return werr
		}
	}
	policy := cfg.Policy
	if c.Timeout > 0 {
		policy.Timeout = config.Duration(c.Timeout)
	}
	if c.Grace > 0 {
		policy.Grace = config.Duration(c.Grace)
	}
	opts, err := c.kubeFlags.options(GatherOptions{Timeout: policy.Timeout.D(), Concurrency: c.Concurrency, Log: log})
	if err != nil {
		return noRun(err)
	}
	rc, err := c.kubeFlags.restConfig()
	if err != nil {
		return noRun(err)
	}
	kube.RouteKlog(log)
	start := time.Now()
	if c.InventoryOnly {
		return inventoryOnly(ctx, io, rc, opts, start)
	}
	opts.PairingSources = pairingSources(cfg.Pairings)
	in, err := c.gatherKube(ctx, rc, policy, opts)
	if err != nil {
		return noRun(err)
	}
	in.Config.Pairings = cfg.Pairings
	return c.judge(ctx, io, log, func() audit.Report { return audit.Run(in, policy, time.Now()) }, failOn, start)
}

// inventoryOnly runs the Secret/ConfigMap inventory to its initial sync and prints its size: the
// path test/scale times against a bare list loop. Nothing of the Secrets is printed.
func inventoryOnly(ctx context.Context, io *streams, rc *rest.Config, opt KubeOptions, start time.Time) error {
	inv, err := kube.New(rc, opt.inventoryOptions())
	if err != nil {
		return noRun(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = inv.Run(runCtx) }()
	defer func() { stop(); <-done }()
	syncCtx, cancel := context.WithTimeout(ctx, cmp.Or(opt.SyncTimeout, 30*time.Second))
	err = inv.WaitSynced(syncCtx)
	cancel()
	if err != nil {
		return noRun(fmt.Errorf("read the cluster: %w", err))
	}
	took := time.Since(start)
	snap := inv.Snapshot()
	st := inv.Stats()
	certs := 0
	for _, s := range snap.Secrets {
		certs += len(s.Items)
	}
	out := map[string]any{"secrets": len(snap.Secrets), "configmaps": len(snap.ConfigMaps), "certificates": certs,
		"list_requests": st.ListRequests, "listed_objects": st.ListedObjects, "secrets_parsed": st.SecretsParsed,
		"sync_seconds": took.Seconds()}
	enc := json.NewEncoder(io.Out)
	if err := enc.Encode(out); err != nil {
		return noRun(fmt.Errorf("write inventory summary: %w", err))
	}
	return nil
}
