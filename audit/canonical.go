package audit

import (
	"cmp"
	"crypto/x509"
	"slices"
	"strings"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoyadmin"
	"github.com/certdrift/certdrift/probe/files"
	"github.com/certdrift/certdrift/probe/tlsprobe"
)

// The verdict must not depend on the order in which Envoy lists its TLS contexts, secrets,
// listeners or certificates: /certs has no defined order (lingering contexts of drained listeners
// and duplicates appear anywhere), and config_dump's order follows Envoy's hash maps. Rather
// than make every check order-proof on its own, Run judges a canonical copy of its inputs: each
// list sorted by what its entries are, never by where they were printed. The inputs themselves
// are not modified (Run is pure).

func canonicalDesired(obs []files.Observation) []files.Observation {
	out := slices.Clone(obs)
	slices.SortStableFunc(out, func(x, y files.Observation) int {
		return cmp.Or(cmp.Compare(x.Source.Name, y.Source.Name), cmp.Compare(x.Source.Dir, y.Source.Dir))
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
		ev.Served = slices.Clone(ev.Served)
		slices.SortStableFunc(ev.Served, func(x, y tlsprobe.Result) int {
			return cmp.Or(cmp.Compare(x.Target.Address, y.Target.Address), cmp.Compare(x.Target.SNI, y.Target.SNI),
				cmp.Compare(chainKey(x.Chain), chainKey(y.Chain)))
		})
	}
	slices.SortStableFunc(out, func(x, y EnvoyView) int { return cmp.Compare(x.Config.Name, y.Config.Name) })
	return out
}

func canonicalSnapshot(snap *envoyadmin.Snapshot) *envoyadmin.Snapshot {
	c := *snap
	c.Contexts = make([]envoyadmin.TLSContext, len(snap.Contexts))
	for i, tc := range snap.Contexts {
		c.Contexts[i] = envoyadmin.TLSContext{CA: sortedDetails(tc.CA), Chain: sortedDetails(tc.Chain)}
	}
	slices.SortStableFunc(c.Contexts, func(x, y envoyadmin.TLSContext) int {
		return cmp.Or(cmp.Compare(detailsKey(x.Chain), detailsKey(y.Chain)), cmp.Compare(detailsKey(x.CA), detailsKey(y.CA)))
	})
	c.Secrets = make([]envoyadmin.Secret, len(snap.Secrets))
	for i, s := range snap.Secrets {
		s.Chain = leafFirst(s.Chain)
		c.Secrets[i] = s
	}
	slices.SortStableFunc(c.Secrets, func(x, y envoyadmin.Secret) int {
		return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.State, y.State), cmp.Compare(x.VersionInfo, y.VersionInfo),
			x.LastUpdated.Compare(y.LastUpdated), cmp.Compare(chainKey(x.Chain), chainKey(y.Chain)),
			cmp.Compare(chainKey(x.ValidationCA), chainKey(y.ValidationCA)), cmp.Compare(x.CertFile, y.CertFile), cmp.Compare(x.CAFile, y.CAFile))
	})
	c.Listeners = slices.Clone(snap.Listeners)
	slices.SortStableFunc(c.Listeners, func(x, y envoyadmin.FilterChainTLS) int {
		return cmp.Or(cmp.Compare(x.Listener, y.Listener), cmp.Compare(x.State, y.State), cmp.Compare(x.Address, y.Address),
			cmp.Compare(x.FilterChain, y.FilterChain), cmp.Compare(strings.Join(x.ServerNames, ","), strings.Join(y.ServerNames, ",")),
			cmp.Compare(strings.Join(x.SDSCertNames, ","), strings.Join(y.SDSCertNames, ",")),
			cmp.Compare(strings.Join(x.CertFiles, ","), strings.Join(y.CertFiles, ",")))
	})
	c.ConfigSkipped = slices.Clone(snap.ConfigSkipped)
	slices.SortStableFunc(c.ConfigSkipped, func(x, y envoyadmin.ConfigSkip) int { return cmp.Compare(x.String(), y.String()) })
	return &c
}

func sortedDetails(ds []envoyadmin.CertDetail) []envoyadmin.CertDetail {
	out := slices.Clone(ds)
	slices.SortStableFunc(out, func(x, y envoyadmin.CertDetail) int { return cmp.Compare(detailKey(x), detailKey(y)) })
	return out
}

func detailKey(d envoyadmin.CertDetail) string {
	serial := d.SerialText
	if d.Serial != nil {
		serial = pki.SerialHex(d.Serial)
	}
	return strings.Join([]string{d.Path, serial, d.ValidFrom.UTC().Format(time.RFC3339Nano), d.Expiration.UTC().Format(time.RFC3339Nano),
		strings.Join(d.DNSNames, ","), strings.Join(d.URIs, ","), strings.Join(d.IPAddresses, ",")}, "|")
}

func detailsKey(ds []envoyadmin.CertDetail) string {
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
