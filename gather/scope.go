package gather

import (
	"slices"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
)

// Scope narrows a round to part of the fleet: every Envoy (the zero Scope, Fleet), the Envoys of
// one namespace, or one Envoy. A repair's post-check verifies the pod it restarted with a
// one-pod scope instead of gathering the whole fleet again.
//
// Only the loaded and served views narrow fully: a narrowed Kubernetes round keeps the desired
// sources of the scope's namespace and every source its Envoys mount or name (the audit's
// inferred bindings look no further than a pod's namespace), so the audit judges the scoped
// Envoys exactly as a fleet round would.
type Scope struct {
	// Namespace keeps the Envoys of one namespace (Kubernetes mode; local Envoys have none).
	Namespace string
	// Envoy keeps one Envoy, by the name the audit gives it: "namespace/pod" in Kubernetes mode,
	// the configured name in local mode.
	Envoy string
}

// Fleet is every Envoy.
var Fleet = Scope{}

// InNamespace is the Envoys of namespace ns.
func InNamespace(ns string) Scope { return Scope{Namespace: ns} }

// OnePod is the Envoy of one Kubernetes pod.
func OnePod(namespace, pod string) Scope {
	return Scope{Namespace: namespace, Envoy: ref.Envoy{Namespace: namespace, Pod: pod}.String()}
}

// OneEnvoy is one Envoy of the local configuration, by its name.
func OneEnvoy(name string) Scope { return Scope{Envoy: name} }

// narrowed reports whether the scope is less than the fleet.
func (sc Scope) narrowed() bool { return sc.Namespace != "" || sc.Envoy != "" }

// keepsPod reports whether a Kubernetes pod is in scope.
func (sc Scope) keepsPod(namespace, pod string) bool {
	if sc.Namespace != "" && namespace != sc.Namespace {
		return false
	}
	return sc.Envoy == "" || sc.Envoy == ref.Envoy{Namespace: namespace, Pod: pod}.String()
}

// scopeTargets keeps the targets in scope.
func scopeTargets(ts []kube.EnvoyTarget, sc Scope) []kube.EnvoyTarget {
	if !sc.narrowed() {
		return ts
	}
	return shardTargets(ts, sc.keepsPod)
}

// scopeDesired keeps, for a narrowed scope, the inventory's sources in the scope's namespace and
// those the scope's Envoys or pairings reference (refs); the fleet keeps everything.
func scopeDesired(inv kube.Snapshot, sc Scope, refs []ref.Source) kube.Snapshot {
	if !sc.narrowed() {
		return inv
	}
	ns := sc.Namespace
	if e, ok := ref.ParseEnvoy(sc.Envoy); ns == "" && ok {
		ns = e.Namespace
	}
	wanted := refSet(refs)
	return keepDesired(inv, func(r ref.Source) bool { return r.Namespace == ns || wanted[r] })
}

// shardSources says which sources one shard's round must judge (KubeOptions.Shard): those the
// shard owns (the collector exposes them: collector.Shard on "namespace/name", the same hash as
// its pods), every source in a namespace where the shard has an Envoy (the audit infers a pod's
// bindings from the Secrets of its own namespace, and looks no further), and those its Envoys
// or the pairings reference (refs: another namespace's Secret named over SDS, a pairing's
// bundle). That is exactly what judging its own Envoys and sources reads, so each replica
// judges about 1/N of the Secrets, with the verdicts of an unsharded round
// (test/shardcheck). nil when keep is: every source.
func shardSources(keep func(namespace, name string) bool, targets []kube.EnvoyTarget, refs []ref.Source) func(ref.Source) bool {
	if keep == nil {
		return nil
	}
	podNamespaces := map[string]bool{}
	for _, t := range targets {
		podNamespaces[t.Namespace] = true
	}
	wanted := refSet(refs)
	return func(r ref.Source) bool {
		return keep(r.Namespace, r.Name) || podNamespaces[r.Namespace] || wanted[r]
	}
}

// promoteNamespaces are the namespaces whose Secrets a shard's round may judge beyond those it
// owns (shardSources, scopeDesired): its Envoy pods' and the scope's.
func promoteNamespaces(targets []kube.EnvoyTarget, sc Scope) []string {
	var out []string
	add := func(ns string) {
		if ns != "" && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	for _, t := range targets {
		add(t.Namespace)
	}
	add(sc.Namespace)
	if e, ok := ref.ParseEnvoy(sc.Envoy); ok {
		add(e.Namespace)
	}
	return out
}

// shardCertManager keeps the Certificates whose Secret the shard judges (judged, from
// shardSources): the collector exposes a Certificate with the replica that owns its Secret, and
// each Envoy's revision of it with the replica that owns the Envoy. CertificateRequests stay:
// they are matched to their Certificate by namespace and owner.
func shardCertManager(cm kube.CertManager, judged func(ref.Source) bool) kube.CertManager {
	if judged == nil {
		return cm
	}
	// Each Read builds its own slice: filtering in place changes nothing the reader holds.
	cm.Certificates = slices.DeleteFunc(cm.Certificates, func(c kube.CMCertificate) bool {
		return !judged(ref.Source{Kind: ref.Secret, Namespace: c.Namespace, Name: c.SecretName})
	})
	return cm
}

// refSet is refs as a set.
func refSet(refs []ref.Source) map[ref.Source]bool {
	set := make(map[ref.Source]bool, len(refs))
	for _, r := range refs {
		set[r] = true
	}
	return set
}

// keepDesired is inv with only the Secrets and ConfigMaps keep returns true for.
func keepDesired(inv kube.Snapshot, keep func(ref.Source) bool) kube.Snapshot {
	out := kube.Snapshot{At: inv.At, Synced: inv.Synced, Errors: inv.Errors}
	for _, s := range inv.Secrets {
		if keep(ref.Source{Kind: ref.Secret, Namespace: s.Namespace, Name: s.Name}) {
			out.Secrets = append(out.Secrets, s)
		}
	}
	for _, c := range inv.ConfigMaps {
		if keep(ref.Source{Kind: ref.ConfigMap, Namespace: c.Namespace, Name: c.Name}) {
			out.ConfigMaps = append(out.ConfigMaps, c)
		}
	}
	return out
}

// scopeConfig is cfg with only the Envoys in scope (local mode: Namespace does not apply).
func scopeConfig(cfg *config.Config, sc Scope) *config.Config {
	if sc.Envoy == "" {
		return cfg
	}
	c := *cfg
	c.Envoys = nil
	for _, e := range cfg.Envoys {
		if e.Name == sc.Envoy {
			c.Envoys = append(c.Envoys, e)
		}
	}
	return &c
}
