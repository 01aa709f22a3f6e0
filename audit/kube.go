package audit

import (
	"cmp"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/ref"
)

// This file holds the checks that need the pod context of the Kubernetes mode (EnvoyView.Pod):
// namespace scoping of inferred bindings, processes that cannot see a Secret update
// (STALE_PROCESS, SUBPATH_MOUNT), replicas that disagree (REPLICA_DIVERGENCE) and the live
// trust between declared peers (CA_BUNDLE_GAP on what pods hold and serve).

// scope limits the heuristic bindings of one Envoy. A pod can mount only Secrets of its own
// namespace, but the last-resort inference binds a loaded certificate to any desired one with the
// same DNS names: with the same host name served in two namespaces (a staging copy, a
// migration), every pod would be "stale" against the other namespace's Secret. Exact names (an
// SDS secret called "ns/name", an annotation) still reach across namespaces.
type scope struct {
	namespace string          // "" in local mode: no limit
	named     map[string]bool // sources the Envoy's bindings name explicitly
}

func scopeOf(ev *EnvoyView) scope {
	if ev.Pod == nil {
		return scope{}
	}
	s := scope{namespace: ev.Pod.Namespace, named: map[string]bool{}}
	for _, b := range ev.Config.Bindings {
		s.named[b.Source] = true
	}
	return s
}

// allows reports whether a heuristic may bind the Envoy to desired certificate d.
func (s scope) allows(d *desiredCert) bool {
	if s.namespace == "" || s.named[d.source] {
		return true
	}
	return sourceNamespace(d.source) == s.namespace
}

// sourceNamespace is the namespace of a Kubernetes-mode source name: "ns/secret" or
// "configmap:ns/name" ("" for another name).
func sourceNamespace(source string) string {
	src, _ := ref.ParseKube(source)
	return src.Namespace
}

// checkProcess reports what a pod's process cannot have picked up: a Secret mounted with subPath
// never receives updates (SUBPATH_MOUNT), and a component declared as not hot-reloading, or one
// reading a subPath mount, that started before its Secret last changed still uses the old
// certificate (STALE_PROCESS), whatever its admin says — and many such components have no admin.
func (a *auditor) checkProcess(ev *EnvoyView, bs []*Binding, state map[*Binding]string, loaded map[*Binding][]loadedCert) {
	pod := ev.Pod
	if pod == nil {
		return
	}
	subPath := map[string]MountRisk{}
	for _, r := range pod.Risks {
		a.add(Finding{Code: SubPathMount, Severity: Warning,
			Subject:  Subject{Envoy: ev.Config.Name, Source: r.Source, File: r.MountPath},
			Evidence: map[string]string{"container": r.Container, "mount_path": r.MountPath, "sub_path": r.SubPath},
			Message:  fmt.Sprintf("container %s mounts %s at %s with subPath: it never sees an update of the Secret (%s)", r.Container, r.Source, r.MountPath, r.Reason),
			Advice:   "mount the whole Secret volume (no subPath) and point Envoy at the file inside it, or restart the pod after every rotation"})
		if _, ok := subPath[r.Source]; !ok {
			subPath[r.Source] = r
		}
	}
	if !pod.NoHotReload && len(subPath) == 0 {
		return
	}
	// The pod's mounts name its sources; the bindings carry them once each.
	sources := map[[2]string]*Binding{}
	for _, b := range bs {
		sources[[2]string{b.Source, b.Item}] = b
	}
	for _, cb := range ev.Config.Bindings {
		if k := [2]string{cb.Source, cb.Item}; sources[k] == nil {
			sources[k] = nil // a source the pod mounts that no binding judged (no admin, no handshake)
		}
	}
	for _, r := range subPath {
		k := [2]string{r.Source, ""}
		if _, ok := sources[k]; !ok {
			sources[k] = nil
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(sources), func(x, y [2]string) int {
		return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1]))
	}) {
		b := sources[k]
		risk, isSubPath := subPath[k[0]]
		if !pod.NoHotReload && !isSubPath {
			continue
		}
		d := a.desired.lookup(k[0], k[1])
		if d == nil || d.changedAt.IsZero() || pod.StartedAt.IsZero() {
			continue
		}
		if !d.changedAt.After(pod.StartedAt) {
			// It started after the last change, so it read the current certificate.
			if b != nil && state[b] == StateUnknown {
				state[b] = StateConverged
			}
			continue
		}
		isStale, age := a.stale(d)
		if !isStale {
			if b != nil && state[b] != StateStale {
				state[b] = StateConverging
			}
			continue
		}
		// NoHotReload comes from the annotation or from discovery knowing the component
		// (Envoy Gateway's rate limit): the message names both.
		why := "it does not reload certificates (annotation " + AnnotationHotReload + `: "false", or a component known not to, such as Envoy Gateway's rate limit)`
		if isSubPath {
			why = fmt.Sprintf("it reads the Secret through a subPath mount (%s), which is never updated", risk.MountPath)
		}
		ev2 := desiredEvidence(d)
		ev2["process_started_at"] = pod.StartedAt.UTC().Format(time.RFC3339)
		sev := Warning
		if b != nil && len(loaded[b]) > 0 {
			sev = a.staleSeverity(loaded[b][0].v)
		}
		s := Subject{Envoy: ev.Config.Name, Source: d.source, Item: d.item}
		if b != nil {
			s = a.bindingSubject(ev, b)
			state[b] = StateStale
		}
		a.add(Finding{Code: StaleProcess, Severity: sev, Subject: s, Evidence: ev2, Since: timePtr(d.changedAt),
			Message: fmt.Sprintf("pod %s started %s, before %s last changed (%s ago), and %s", ev.Config.Name,
				pod.StartedAt.UTC().Format(time.RFC3339), d.name(), roundDur(age), why),
			Advice: "restart the workload (kubectl rollout restart, or certdrift audit --reload); it keeps the old certificate until then"})
	}
}

// AnnotationHotReload is the pod annotation that declares a component as not reloading its
// certificates ("false"). It is parsed by probe/kube; named here for messages.
const AnnotationHotReload = "certdrift.dev/hot-reload"

// servedRecord is one handshake of a pod, kept for the checks across pods.
type servedRecord struct {
	ev     *EnvoyView
	r      tlsprobe.Result
	source string
	item   string
}

// checkReplicas reports REPLICA_DIVERGENCE: pods of one workload that serve different leaves at
// the same port and SNI, so a client sees a different certificate per connection. It says which
// replicas are wrong: those not serving the desired certificate when some replica serves it,
// else those not serving what most replicas serve. A group whose desired certificate changed
// within the grace period is a rotation in progress, not divergence.
func (a *auditor) checkReplicas(recs []servedRecord) {
	type key struct{ ns, workload, port, sni string }
	groups := map[key][]servedRecord{}
	var order []key
	for _, rec := range recs {
		p := rec.ev.Pod
		if p == nil || p.Workload == "" || len(rec.r.Chain) == 0 {
			continue
		}
		k := key{p.Namespace, p.Workload, portOf(rec.r.Target.Address), rec.r.Target.SNI}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], rec)
	}
	for _, k := range order {
		g := groups[k]
		count := map[string]int{}
		var desired *desiredCert
		converging := false
		for _, rec := range g {
			count[pki.Fingerprint(rec.r.Chain[0])]++
			if d := a.desired.lookup(rec.source, rec.item); d != nil && d.hasLeaf() {
				desired = d
				if isStale, _ := a.stale(d); !isStale {
					converging = true
				}
			}
		}
		if len(count) < 2 || converging {
			continue
		}
		right := ""
		if desired != nil && count[desired.fingerprint()] > 0 {
			right = desired.fingerprint()
		} else {
			best := 0
			for _, fp := range slices.Sorted(maps.Keys(count)) {
				switch n := count[fp]; {
				case n > best:
					right, best = fp, n
				case n == best:
					right = "" // a tie: no majority to call right
				}
			}
		}
		for _, rec := range g {
			leaf := rec.r.Chain[0]
			fp := pki.Fingerprint(leaf)
			if fp == right {
				continue
			}
			ev := map[string]string{
				"served_fingerprint_sha256": fp,
				"served_serial":             pki.SerialHex(leaf.SerialNumber),
				"replicas":                  fmt.Sprint(len(g)),
				"distinct_leaves":           fmt.Sprint(len(count)),
			}
			if right != "" {
				ev["expected_fingerprint_sha256"] = right
				ev["replicas_serving_expected"] = fmt.Sprint(count[right])
			}
			msg := fmt.Sprintf("%s replicas serve %d different leaves at port %s (SNI %s); pod %s serves %s",
				k.workload, len(count), k.port, quote(k.sni), rec.ev.Config.Name, short(fp))
			if right != "" {
				msg += fmt.Sprintf(", %s %s %s", plural(count[right], "replica"), pick(count[right] == 1, "serves", "serve"), short(right))
			}
			a.add(Finding{Code: ReplicaDivergence, Severity: Warning,
				Subject:  Subject{Envoy: rec.ev.Config.Name, Workload: k.workload, Source: rec.source, Item: rec.item, Endpoint: rec.r.Target.Address, SNI: rec.r.Target.SNI},
				Evidence: ev, Message: msg,
				Advice: "restart the replicas that serve the old leaf, one at a time; look for STALE_LOADED on them to learn why they did not reload"})
		}
	}
}

// checkLivePairings checks each declared peer pairing on the pods themselves: the trust each pod
// bound to the bundle's source has loaded must verify the leaf each pod bound to the leaf's
// source presents now (what it served, else what it has loaded). The desired view can be
// consistent while the pods are not: during a CA rotation one side converges first and rejects
// the other (Envoy Gateway #4891). Within the grace period of the change that opened the gap it
// is a warning (the window every rotation has), after it critical.
func (a *auditor) checkLivePairings(envoys []EnvoyView, recs []servedRecord) {
	if len(a.cfg.Pairings) == 0 {
		return
	}
	for _, p := range a.cfg.Pairings {
		var trusts []liveTrust
		var leaves []liveLeaf
		for i := range envoys {
			ev := &envoys[i]
			if t, ok := a.loadedTrust(ev, p.Bundle.Source, p.Bundle.Item); ok {
				trusts = append(trusts, t)
			}
			leaves = append(leaves, a.presentedLeaves(ev, p.Leaf.Source, p.Leaf.Item, recs)...)
		}
		changed := time.Time{}
		for _, r := range [][2]string{{p.Bundle.Source, p.Bundle.Item}, {p.Leaf.Source, p.Leaf.Item}} {
			if d := a.desired.lookup(r[0], r[1]); d != nil && d.changedAt.After(changed) {
				changed = d.changedAt
			}
		}
		for _, t := range trusts {
			seen := map[string]bool{}
			for _, l := range leaves {
				fp := pki.Fingerprint(l.cert)
				if seen[fp] {
					continue
				}
				seen[fp] = true
				res := pki.Verify(l.cert, l.intermediates, t.cas, a.now, x509.ExtKeyUsageAny)
				if res.OK {
					continue
				}
				sev := Critical
				if !changed.IsZero() && a.now.Sub(changed) <= a.policy.Grace.D() {
					sev = Warning
				}
				ev := map[string]string{
					"leaf_fingerprint_sha256": fp,
					"leaf_issuer":             l.cert.Issuer.String(),
					"leaf_presented_by":       l.envoy,
					"leaf_view":               l.view,
					"trust_bundle_size":       fmt.Sprint(len(t.cas)),
					"trust_from":              t.where,
				}
				if res.Err != nil {
					ev["reason"] = res.Err.Error()
				}
				a.add(Finding{Code: CABundleGap, Severity: sev, Evidence: ev, Since: timePtr(changed),
					Subject: Subject{Envoy: t.envoy, Source: p.Bundle.Source, Item: p.Bundle.Item, Secret: t.secret},
					Message: fmt.Sprintf("pairing %s: %s trusts %s that do not verify the leaf %s (issuer %q) that %s %s",
						pairName(p), t.envoy, plural(len(t.cas), "CA"), short(fp), l.cert.Issuer.CommonName, l.envoy, l.view),
					Advice: "the peers reject each other's handshakes; restart the side that has not reloaded, and during a CA rotation distribute the new CA to every bundle before changing any leaf"})
			}
		}
	}
}

type liveTrust struct {
	envoy, secret, where string
	cas                  []*x509.Certificate
}

type liveLeaf struct {
	envoy, view   string
	cert          *x509.Certificate
	intermediates []*x509.Certificate
}

// loadedTrust is the trust bundle an Envoy bound to source has loaded: the bundle its trust
// binding for source holds (trust.go), else the validation secret read from the same watched
// directory as its certificate secret for source (the ca.crt next to tls.crt), else a
// validation secret named after the source, else its only validation secret.
func (a *auditor) loadedTrust(ev *EnvoyView, source, item string) (liveTrust, bool) {
	if ev.Admin == nil {
		return liveTrust{}, false
	}
	for _, tb := range a.trustBindings(ev) {
		if tb.d.source != source || tb.d.item != item {
			continue
		}
		for _, lb := range tb.loaded {
			if lb.cas != nil {
				return liveTrust{envoy: ev.Config.Name, secret: lb.secret, cas: lb.cas, where: lb.where}, true
			}
		}
	}
	bound := false
	dirs := map[string]bool{}
	for _, cb := range ev.Config.Bindings {
		if cb.Source != source {
			continue
		}
		bound = true
		for _, s := range ev.Admin.Secrets {
			if s.HasCertificate && s.WatchedDir != "" && cb.Secret == s.Name {
				dirs[s.WatchedDir] = true
			}
		}
	}
	var only []envoystate.Secret
	for _, s := range ev.Admin.Secrets {
		if !s.HasValidation || len(s.ValidationCA) == 0 {
			continue
		}
		if (bound && s.WatchedDir != "" && dirs[s.WatchedDir]) || s.Name == source {
			return liveTrust{envoy: ev.Config.Name, secret: s.Name, cas: s.ValidationCA, where: "config_dump secret " + s.Name}, true
		}
		only = append(only, s)
	}
	if bound && len(only) == 1 {
		s := only[0]
		return liveTrust{envoy: ev.Config.Name, secret: s.Name, cas: s.ValidationCA, where: "config_dump secret " + s.Name + " (the only trust bundle it holds)"}, true
	}
	return liveTrust{}, false
}

// presentedLeaves is what an Envoy bound to source presents to peers: the leaves its handshakes
// served for that source, else the certificate it has loaded for it (a client certificate is
// never served to us).
func (a *auditor) presentedLeaves(ev *EnvoyView, source, item string, recs []servedRecord) []liveLeaf {
	var out []liveLeaf
	for _, rec := range recs {
		if rec.ev == ev && rec.source == source && rec.item == item && len(rec.r.Chain) > 0 {
			out = append(out, liveLeaf{envoy: ev.Config.Name, view: "serves", cert: rec.r.Chain[0], intermediates: rec.r.Chain[1:]})
		}
	}
	if len(out) > 0 || ev.Admin == nil {
		return out
	}
	bound, named := false, map[string]bool{}
	for _, cb := range ev.Config.Bindings {
		if cb.Source == source && cb.Item == item {
			bound = true
			if cb.Secret != "" {
				named[cb.Secret] = true
			}
		}
	}
	if !bound {
		return nil
	}
	// A secret the binding names; else (an upstream TLS context, which listeners do not tie to
	// a mount) a loaded certificate with the desired certificate's names — an old or new copy
	// of it.
	d := a.desired.lookup(source, item)
	for _, s := range ev.Admin.Secrets {
		if !s.HasCertificate || len(s.Chain) == 0 {
			continue
		}
		if named[s.Name] || (len(named) == 0 && d != nil && d.hasLeaf() && pki.SameNames(s.Chain[0].DNSNames, d.lf.DNSNames) && pki.SameNames(uriStrings(s.Chain[0]), d.lf.URIs)) {
			out = append(out, liveLeaf{envoy: ev.Config.Name, view: "has loaded", cert: s.Chain[0], intermediates: s.Chain[1:]})
		}
	}
	return out
}
