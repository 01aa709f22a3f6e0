package audit

import (
	"cmp"
	"crypto/x509"
	"slices"
	"strings"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
)

// The verdict must not depend on the order in which Envoy lists its TLS contexts, secrets,
// listeners or certificates: /certs has no defined order (lingering contexts of drained listeners
// and duplicates appear anywhere), and config_dump's order follows Envoy's hash maps. Rather
// than make every check order-proof on its own, Run judges a canonical copy of its inputs: each
// list sorted by what its entries are, never by where they were printed. The inputs themselves
// are not modified (Run is pure).

func canonicalDesired(obs []desired.Observation) []desired.Observation {
	out := slices.Clone(obs)
	slices.SortStableFunc(out, func(x, y desired.Observation) int {
		return cmp.Or(cmp.Compare(x.Ref.String(), y.Ref.String()), cmp.Compare(x.Dir, y.Dir))
	})
	return out
}

func canonicalEnvoys(evs []EnvoyView) []EnvoyView {
	out := slices.Clone(evs)
	for i := range out {
		ev := &out[i]
		if ev.Admin != nil {
			ev.Admin = canonicalSnapshot(ev.Admin)
		}
		ev.Served = sortedBy(ev.Served, func(r tlsprobe.Result) string {
			return r.Target.Address + "\x00" + r.Target.SNI + "\x00" + chainKey(r.Chain)
		})
	}
	slices.SortStableFunc(out, func(x, y EnvoyView) int { return cmp.Compare(x.Config.Name, y.Config.Name) })
	return out
}

func canonicalSnapshot(snap *envoystate.Snapshot) *envoystate.Snapshot {
	c := *snap
	c.Contexts = make([]envoystate.TLSContext, len(snap.Contexts))
	for i, tc := range snap.Contexts {
		tc.CA, tc.Chain = sortedDetails(tc.CA), sortedDetails(tc.Chain)
		c.Contexts[i] = tc
	}
	c.Contexts = sortedBy(c.Contexts, func(tc envoystate.TLSContext) string {
		return detailsKey(tc.Chain) + "\x00" + detailsKey(tc.CA)
	})
	c.Secrets = make([]envoystate.Secret, len(snap.Secrets))
	for i, s := range snap.Secrets {
		s.Chain = leafFirst(s.Chain)
		c.Secrets[i] = s
	}
	c.Secrets = sortedBy(c.Secrets, func(s envoystate.Secret) string {
		return strings.Join([]string{s.Name, string(s.State), s.VersionInfo, s.LastUpdated.UTC().Format(time.RFC3339Nano),
			chainKey(s.Chain), chainKey(s.ValidationCA), s.CertFile, s.CAFile}, "\x00")
	})
	c.Listeners = sortedBy(snap.Listeners, func(fc envoystate.FilterChainTLS) string {
		return strings.Join([]string{fc.Listener, fc.State, fc.Address, fc.FilterChain, strings.Join(fc.ServerNames, ","),
			strings.Join(fc.SDSCertNames, ","), strings.Join(fc.CertFiles, ",")}, "\x00")
	})
	c.ConfigSkipped = slices.Clone(snap.ConfigSkipped)
	slices.SortStableFunc(c.ConfigSkipped, func(x, y envoystate.ConfigSkip) int { return cmp.Compare(x.String(), y.String()) })
	return &c
}

func sortedDetails(ds []envoystate.CertDetail) []envoystate.CertDetail {
	return sortedBy(ds, detailKey)
}

// sortedBy returns a copy of xs sorted by key, computing each key once: the keys hash
// certificates and join names, too costly to recompute in every comparison of a large fleet.
func sortedBy[T any](xs []T, key func(T) string) []T {
	if len(xs) < 2 {
		return slices.Clone(xs)
	}
	type keyed struct {
		k string
		x T
	}
	ks := make([]keyed, len(xs))
	for i, x := range xs {
		ks[i] = keyed{key(x), x}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return cmp.Compare(a.k, b.k) })
	out := make([]T, len(xs))
	for i := range ks {
		out[i] = ks[i].x
	}
	return out
}

func detailKey(d envoystate.CertDetail) string {
	serial := d.SerialText
	if d.Serial != nil {
		serial = pki.SerialHex(d.Serial)
	}
	return strings.Join([]string{d.Path, serial, d.ValidFrom.UTC().Format(time.RFC3339Nano), d.Expiration.UTC().Format(time.RFC3339Nano),
		strings.Join(d.DNSNames, ","), strings.Join(d.URIs, ","), strings.Join(d.IPAddresses, ",")}, "|")
}

func detailsKey(ds []envoystate.CertDetail) string {
	keys := make([]string, len(ds))
	for i, d := range ds {
		keys[i] = detailKey(d)
	}
	return strings.Join(keys, "\n")
}

func chainKey(cs []*x509.Certificate) string {
	keys := make([]string, 0, len(cs))
	for _, c := range cs {
		if c != nil {
			keys = append(keys, pki.Fingerprint(c))
		}
	}
	return strings.Join(keys, ",")
}

// leafFirst returns chain with its leaf first. Envoy serves the first certificate of a PEM chain
// as the leaf, so a well-formed chain is returned unchanged; a chain whose first certificate is a
// CA while exactly one other certificate is not (a bundle pasted in the wrong order) gets that one
// moved to the front, so that the leaf the checks compare is the same for every order of the
// chain entries.
func leafFirst(chain []*x509.Certificate) []*x509.Certificate {
	if len(chain) < 2 || chain[0] == nil || !chain[0].IsCA {
		return chain
	}
	leaf := -1
	for i, c := range chain {
		if c != nil && !c.IsCA {
			if leaf >= 0 {
				return chain
			}
			leaf = i
		}
	}
	if leaf <= 0 {
		return chain
	}
	out := make([]*x509.Certificate, 0, len(chain))
	out = append(out, chain[leaf])
	out = append(out, chain[:leaf]...)
	return append(out, chain[leaf+1:]...)
}
