package bind

import (
	"slices"
	"strings"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
)

// maxFallbackSNIs bounds the SNIs taken from a desired certificate's DNS names when neither the
// pod nor Envoy's listeners name any: a certificate may carry hundreds.
const maxFallbackSNIs = 8

// PodEnvoy is one pod as the audit judges it: an Envoy with its bindings (in the order of
// trust, see the package doc) and TLS endpoints, the mounts that never update, and the trust
// bundles its SDS names resolved to.
type PodEnvoy struct {
	Envoy config.Envoy
	Risks []MountRisk
	Trust []TrustBinding
}

// Pod applies every binding rule of the Kubernetes mode to one pod, in their order: what Envoy
// reports loading (LoadedBindings) first, since the audit keeps the first path it is given for
// a Secret and the reported path is the one /certs and the listeners name; then SDS names (Istio
// kubernetes://, Envoy Gateway ns/name); then the pod spec (Bind); then the trust bundles SDS
// names resolve to (Istio -cacert). Without an admin snapshot only the spec binds. Endpoints
// with no SNI get the bound certificates' DNS names (names, by source: DesiredNames).
func Pod(t kube.EnvoyTarget, admin *envoystate.Snapshot, keys SourceKeys, lookup SecretLookup, names map[string][]string) PodEnvoy {
	pb := Bind(t, keys)
	p := PodEnvoy{Envoy: pb.Envoy, Risks: pb.Risks}
	if admin != nil {
		p.Envoy.Admin = admin.AdminURL
		sds, trust := SDSBindings(t, admin, lookup)
		var trustBindings []config.Binding
		for _, tb := range trust {
			trustBindings = append(trustBindings, tb.Binding(t))
		}
		p.Trust = trust
		p.Envoy.Bindings = slices.Concat(LoadedBindings(t, keys, admin), sds, p.Envoy.Bindings, trustBindings)
	}
	p.Envoy.Endpoints = ProbeEndpoints(t, admin)
	fillSNIs(p.Envoy.Endpoints, p.Envoy.Bindings, names)
	return p
}

// Lookup answers whether the desired view holds a Secret and whether it carries a CA
// bundle, for resolving SDS names (Istio's -cacert rule needs the latter).
func Lookup(obs []desired.Observation) SecretLookup {
	type info struct{ hasCA bool }
	m := make(map[string]info, len(obs))
	for _, o := range obs {
		if o.Ref.Kind == ref.ConfigMap {
			continue
		}
		name := o.Ref.String()
		i := m[name]
		for _, it := range o.Items {
			i.hasCA = i.hasCA || it.HasCA()
		}
		m[name] = i
	}
	return func(source string) (bool, bool) {
		i, ok := m[source]
		return ok, i.hasCA
	}
}

// DesiredNames are the exact DNS names of each desired source's certificates, by source name.
func DesiredNames(obs []desired.Observation) map[string][]string {
	out := map[string][]string{}
	for _, o := range obs {
		name := o.Ref.String()
		for _, it := range o.Items {
			f := it.LeafFacts()
			if f == nil {
				continue
			}
			for _, n := range f.DNSNames {
				if !strings.HasPrefix(n, "*") {
					out[name] = append(out[name], n)
				}
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
