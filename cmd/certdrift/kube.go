package main

import (
	"cmp"
	"context"
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
	"github.com/certdrift/certdrift/probe/files"
	"github.com/certdrift/certdrift/probe/kube"
)

// maxFallbackSNIs bounds the SNIs taken from a desired certificate's DNS names when neither the
// pod nor Envoy's listeners name any: a certificate may carry hundreds.
const maxFallbackSNIs = 8

// kubeRestConfig loads the client configuration from a kubeconfig file and optional context.
func kubeRestConfig(path, kctx string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kctx}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s (context %q): %w", path, kctx, err)
	}
	return cfg, nil
}

// KubeOptions bound one GatherKube.
type KubeOptions struct {
	Namespaces  []string
	AdminMode   kube.AdminMode
	SyncTimeout time.Duration
	GatherOptions
}

// GatherKube observes the three views in a cluster: Secrets from the API (desired), every
// discovered Envoy pod's admin (loaded, directly or through port-forward) and a handshake per pod
// IP, TLS port and SNI (served), with bindings from each pod's spec. Like Gather it records what
// could not be observed in the inputs; it fails only when the cluster itself cannot be read.
func GatherKube(ctx context.Context, rc *rest.Config, policy config.Policy, opt KubeOptions) (audit.Inputs, error) {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opt.Log = log
	if opt.Concurrency < 1 {
		opt.Concurrency = 1
	}
	if opt.Timeout <= 0 {
		opt.Timeout = policy.Timeout.D()
	}
	if opt.SyncTimeout <= 0 {
		opt.SyncTimeout = 30 * time.Second
	}
	inv, err := kube.New(rc, kube.Options{Namespaces: opt.Namespaces, Logger: log})
	if err != nil {
		return audit.Inputs{}, err
	}
	disc, err := kube.NewDiscovery(rc, kube.DiscoveryOptions{Namespaces: opt.Namespaces, Logger: log})
	if err != nil {
		return audit.Inputs{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Add(2)
	go func() { defer running.Done(); _ = inv.Run(runCtx) }()
	go func() { defer running.Done(); _ = disc.Run(runCtx) }()
	// Informers stop before we return: nothing of ours outlives the audit.
	defer func() { stop(); running.Wait() }()

	syncCtx, cancel := context.WithTimeout(ctx, opt.SyncTimeout)
	err = errors.Join(inv.WaitSynced(syncCtx), disc.WaitSynced(syncCtx))
	cancel()
	if err != nil {
		return audit.Inputs{}, fmt.Errorf("read the cluster: %w", err)
	}
	desired := inv.Observations()
	snap := disc.Targets(ctx)
	for _, e := range snap.Errors {
		log.Warn("envoy discovery", "source", e.Source, "err", e.Err)
	}
	log.Info("cluster read", "secret_sources", len(desired), "envoys", len(snap.Targets))

	dialer, err := kube.NewAdminDialer(rc, kube.AdminAccessOptions{Mode: opt.AdminMode, Logger: log})
	if err != nil {
		return audit.Inputs{}, err
	}
	defer dialer.Close()

	leaves := desiredNames(desired)
	envoys := make([]config.Envoy, len(snap.Targets))
	views := make([]audit.EnvoyView, len(snap.Targets))
	forEach(len(snap.Targets), opt.Concurrency, func(i int) {
		t := snap.Targets[i]
		for _, e := range t.AnnotationErrors {
			log.Warn("envoy pod annotation", "envoy", t.Key(), "err", e)
		}
		pb := kube.Bind(t, "")
		for _, r := range pb.Risks {
			// No finding code exists for it yet: said loudly instead of dropped.
			log.Warn("secret mount never updates", "envoy", t.Key(), "container", r.Container, "volume", r.Volume,
				"mount_path", r.MountPath, "sub_path", r.SubPath, "source", r.Source, "reason", r.Reason)
		}
		e := pb.Envoy
		admin := snapshotPod(ctx, dialer, t, opt.Timeout, log)
		e.Admin = admin.AdminURL
		// What Envoy reports loading comes first: the audit keeps the first path it is given for a
		// Secret, and the reported path is the one /certs and the listeners name.
		e.Bindings = append(kube.LoadedBindings(t, "", admin), e.Bindings...)
		if len(e.Endpoints) == 0 {
			e.Endpoints = kube.ListenerEndpoints(t.PodIP, admin.Listeners)
		}
		fillSNIs(e.Endpoints, e.Bindings, leaves)
		envoys[i] = e
		views[i] = audit.EnvoyView{Config: e, Admin: admin}
	})
	dialer.CloseIdle()
	probeEndpoints(ctx, envoys, views, opt.GatherOptions, log)
	return audit.Inputs{Config: &config.Config{Envoys: envoys, Policy: policy}, Desired: desired, Envoys: views}, nil
}

// snapshotPod reads one pod's admin; a failure is recorded on every part of the snapshot, so the
// audit reports the pod as unreachable instead of as an Envoy holding nothing.
func snapshotPod(ctx context.Context, d *kube.AdminDialer, t kube.EnvoyTarget, timeout time.Duration, log *slog.Logger) *envoyadmin.Snapshot {
	failed := func(url string, err error) *envoyadmin.Snapshot {
		log.Warn("envoy admin", "envoy", t.Key(), "err", err)
		return &envoyadmin.Snapshot{AdminURL: url, CertsErr: err, ConfigErr: err, StatsErr: err, CollectedAt: time.Now()}
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

// fillSNIs gives an endpoint with no SNI the DNS names of the certificates bound to its pod
// (issue 4: listener server_names, else the desired certificate's DNS SANs, else none).
func fillSNIs(eps []config.Endpoint, bs []config.Binding, names map[string][]string) {
	var snis []string
	for _, b := range bs {
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
	mode, err := kube.ParseAdminMode(c.AdminAccess)
	if err != nil {
		return noRun(fmt.Errorf("--admin-access: %w", err))
	}
	policy := config.DefaultPolicy
	if c.Timeout > 0 {
		policy.Timeout = config.Duration(c.Timeout)
	}
	if c.Grace > 0 {
		policy.Grace = config.Duration(c.Grace)
	}
	rc, err := kubeRestConfig(c.Kubeconfig, c.Context)
	if err != nil {
		return noRun(err)
	}
	kube.RouteKlog(log)
	start := time.Now()
	in, err := GatherKube(ctx, rc, policy, KubeOptions{
		Namespaces: c.Namespace, AdminMode: mode, SyncTimeout: c.SyncTimeout,
		GatherOptions: GatherOptions{Timeout: policy.Timeout.D(), Concurrency: c.Concurrency, Log: log},
	})
	if err != nil {
		return noRun(err)
	}
	return c.judge(ctx, io, log, func() audit.Report { return AuditByNamespace(in, policy, time.Now()) }, failOn, start)
}

// AuditByNamespace judges Kubernetes inputs one namespace at a time and merges the reports. A
// pod can mount only Secrets of its own namespace, but the audit's last-resort inference binds a
// loaded certificate to any desired one with the same DNS names: with the same host name served
// in two namespaces (a staging copy, a migration), every pod would be "stale" against the other
// namespace's Secret. So each namespace's Envoys are judged against that namespace's Secrets and
// ConfigMaps plus the Secrets their bindings name elsewhere (certdrift.dev/secrets), and the
// desired view on its own is judged once, over everything.
func AuditByNamespace(in audit.Inputs, policy config.Policy, now time.Time) audit.Report {
	whole := audit.Run(audit.Inputs{Config: &config.Config{Policy: policy}, Desired: in.Desired}, policy, now)
	r := audit.Report{GeneratedAt: now, Bindings: []audit.Binding{}, Findings: []audit.Finding{}}
	for _, f := range whole.Findings {
		if f.Subject.Envoy == "" {
			r.Findings = append(r.Findings, f)
		}
	}
	byNS := map[string][]audit.EnvoyView{}
	var order []string
	for _, ev := range in.Envoys {
		ns, _, _ := strings.Cut(ev.Config.Name, "/")
		if _, ok := byNS[ns]; !ok {
			order = append(order, ns)
		}
		byNS[ns] = append(byNS[ns], ev)
	}
	for _, ns := range order {
		evs := byNS[ns]
		named := map[string]bool{}
		var envoys []config.Envoy
		for _, ev := range evs {
			envoys = append(envoys, ev.Config)
			for _, b := range ev.Config.Bindings {
				named[b.Source] = true
			}
		}
		var desired []files.Observation
		for _, o := range in.Desired {
			n := strings.TrimPrefix(o.Source.Name, "configmap:")
			if strings.HasPrefix(n, ns+"/") || named[o.Source.Name] {
				desired = append(desired, o)
			}
		}
		part := audit.Run(audit.Inputs{Config: &config.Config{Envoys: envoys, Policy: policy}, Desired: desired, Envoys: evs}, policy, now)
		r.Bindings = append(r.Bindings, part.Bindings...)
		for _, f := range part.Findings {
			// Findings about the desired view alone came from the whole run.
			if f.Subject.Envoy != "" {
				r.Findings = append(r.Findings, f)
			}
		}
		r.Summary.Handshakes += part.Summary.Handshakes
	}
	slices.SortStableFunc(r.Findings, func(x, y audit.Finding) int {
		return cmp.Or(cmp.Compare(y.Severity, x.Severity), cmp.Compare(x.Subject.Envoy, y.Subject.Envoy),
			cmp.Compare(x.Subject.Source, y.Subject.Source), cmp.Compare(x.Code, y.Code))
	})
	r.Summary.DesiredSources = len(in.Desired)
	r.Summary.Envoys = len(in.Envoys)
	r.Summary.Bindings = len(r.Bindings)
	r.Summary.Findings = map[string]int{}
	for _, f := range r.Findings {
		r.Summary.Findings[f.Severity.String()]++
	}
	return r
}
