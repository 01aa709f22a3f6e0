package kube

import (
	"crypto/x509"
	"path"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/ref"
)

// Observations converts the snapshot into desired.Observation values, one per Secret and one per
// ConfigMap. Paths are "namespace/name/key" (never a real file path, so they cannot be mistaken
// for the paths Envoy reports). Certificates are rebuilt from their DER; no private key is
// involved (Item.Key carries only the public half).
func (s *Snapshot) Observations() []desired.Observation {
	out := make([]desired.Observation, 0, len(s.Secrets)+len(s.ConfigMaps))
	bundles := map[*Bundle]bundleX509{}
	for i := range s.Secrets {
		sec := s.Secrets[i]
		o := secretObservation(sec)
		for j := range sec.Items {
			o.Items = append(o.Items, item(sec, &sec.Items[j], bundles))
		}
		out = append(out, o)
	}
	return s.appendConfigMaps(out, parsedCA(bundles))
}

// LazyObservations is Observations with the certificates left unparsed (desired.Lazy): each
// one's facts, from facts (parsed once per certificate while the cache keeps it; nil parses
// every time), and its DER for desired.Item.Load. gather.Session hands these to every round with
// the cache it keeps, so that an unchanged Secret costs no parse (issue 20). Items sharing a CA
// bundle share its desired.Cert slice.
func (s *Snapshot) LazyObservations(facts *FactsCache) []desired.Observation {
	out := make([]desired.Observation, 0, len(s.Secrets)+len(s.ConfigMaps))
	bundles := map[*Bundle][]desired.Cert{}
	parsed := map[*Bundle]bundleX509{}
	for i := range s.Secrets {
		sec := s.Secrets[i]
		o := secretObservation(sec)
		if its, ok := facts.itemsOf(sec); ok {
			o.Items = its
			// Secrets converted later in the round share these bundles, as within one round.
			for j := range sec.Items {
				if b := sec.Items[j].CA; b != nil && its[j].Lazy != nil && len(its[j].Lazy.CA) > 0 {
					if _, have := bundles[b]; !have {
						bundles[b] = its[j].Lazy.CA
					}
				}
			}
			out = append(out, o)
			continue
		}
		o.Items = make([]desired.Item, 0, len(sec.Items))
		allLazy := true
		for j := range sec.Items {
			it := &sec.Items[j]
			li, ok := lazyItem(sec, it, bundles, facts)
			if !ok {
				// A certificate that does not parse (only a summary built by hand): parsed
				// now, so that its error is reported as Observations reports it.
				li, allLazy = item(sec, it, parsed), false
			}
			o.Items = append(o.Items, li)
		}
		if allLazy {
			facts.keepItems(sec, o.Items)
		}
		out = append(out, o)
	}
	parse := parsedCA(parsed)
	return s.appendConfigMaps(out, func(it *desired.Item, b *Bundle) {
		if len(b.Certs) == 0 {
			return
		}
		if ca, ok := lazyBundle(b, bundles, facts); ok {
			it.Lazy = &desired.Lazy{CA: ca}
			return
		}
		parse(it, b)
	})
}

// secretObservation is a Secret's observation without its items.
func secretObservation(sec *SecretSummary) desired.Observation {
	return desired.Observation{
		Ref:       ref.Source{Kind: ref.Secret, Namespace: sec.Namespace, Name: sec.Name},
		ChangedAt: sec.ChangedAt,
		Err:       sec.Err,
	}
}

// appendConfigMaps appends one observation per ConfigMap, an item per bundle key, whose CA
// bundle (when it has one) ca fills in: parsed for Observations, left unparsed for
// LazyObservations.
func (s *Snapshot) appendConfigMaps(out []desired.Observation, ca func(*desired.Item, *Bundle)) []desired.Observation {
	for i := range s.ConfigMaps {
		cm := &s.ConfigMaps[i]
		o := desired.Observation{
			Ref:       ref.Source{Kind: ref.ConfigMap, Namespace: cm.Namespace, Name: cm.Name},
			ChangedAt: cm.ChangedAt,
			Err:       cm.Err,
		}
		for _, kb := range cm.Bundles {
			it := desired.Item{Name: kb.Key, CAPath: path.Join(cm.Namespace, cm.Name, kb.Key), CAErr: kb.Err}
			if kb.Bundle != nil {
				ca(&it, kb.Bundle)
			}
			o.Items = append(o.Items, it)
		}
		out = append(out, o)
	}
	return out
}

// parsedCA fills in an item's CA bundle parsed, each shared bundle once (cache).
func parsedCA(cache map[*Bundle]bundleX509) func(*desired.Item, *Bundle) {
	return func(it *desired.Item, b *Bundle) {
		bx := toX509(b, cache)
		it.CA, it.CAErr = bx.certs, firstErr(it.CAErr, bx.err)
	}
}

func lazyItem(sec *SecretSummary, it *ItemSummary, bundles map[*Bundle][]desired.Cert, facts *FactsCache) (desired.Item, bool) {
	p := func(key string) string {
		if key == "" {
			return ""
		}
		return path.Join(sec.Namespace, sec.Name, key)
	}
	fi := desired.Item{Name: it.Name, CertPath: p(it.CertKey), KeyPath: p(it.KeyKey), CAPath: p(it.CAKey),
		ChainErr: it.ChainErr, KeyErr: it.KeyErr, CAErr: it.CAErr, Lazy: &desired.Lazy{}}
	if len(it.Chain) > 0 {
		chain, ok := lazyCerts(it.Chain, facts)
		if !ok {
			return desired.Item{}, false
		}
		fi.Lazy.Chain = chain
	}
	if it.Key != nil {
		fi.Key = &pki.KeyInfo{Algorithm: it.Key.Algorithm, Format: it.Key.Format}
		if it.Key.Matches && len(it.Chain) > 0 {
			// The summary keeps no key when it matched the leaf (KeySummary.Public): Load hands
			// the audit the leaf's own public key, as Observations does.
			fi.Lazy.KeyIsLeaf = true
		} else {
			fi.Key.Public = it.Key.Public
		}
	}
	if it.CA != nil && len(it.CA.Certs) > 0 {
		ca, ok := lazyBundle(it.CA, bundles, facts)
		if !ok {
			return desired.Item{}, false
		}
		fi.Lazy.CA = ca
	}
	return fi, true
}

func lazyBundle(b *Bundle, cache map[*Bundle][]desired.Cert, facts *FactsCache) ([]desired.Cert, bool) {
	if cs, ok := cache[b]; ok {
		return cs, true
	}
	cs, ok := lazyCerts(b.Certs, facts)
	if ok {
		cache[b] = cs
	}
	return cs, ok
}

func lazyCerts(cs []Cert, facts *FactsCache) ([]desired.Cert, bool) {
	out := make([]desired.Cert, len(cs))
	for i, c := range cs {
		f, ok := facts.facts(c.DER)
		if !ok {
			return nil, false
		}
		out[i] = desired.Cert{DER: c.DER, Facts: f}
	}
	return out, true
}

type bundleX509 struct {
	certs []*x509.Certificate
	err   error
}

func item(sec *SecretSummary, it *ItemSummary, bundles map[*Bundle]bundleX509) desired.Item {
	p := func(key string) string {
		if key == "" {
			return ""
		}
		return path.Join(sec.Namespace, sec.Name, key)
	}
	fi := desired.Item{Name: it.Name, CertPath: p(it.CertKey), KeyPath: p(it.KeyKey), CAPath: p(it.CAKey),
		ChainErr: it.ChainErr, KeyErr: it.KeyErr, CAErr: it.CAErr}
	if len(it.Chain) > 0 {
		chain, err := parseDER(it.Chain)
		fi.Chain, fi.ChainErr = chain, firstErr(fi.ChainErr, err)
	}
	if it.Key != nil {
		pub := it.Key.Public
		if it.Key.Matches && len(fi.Chain) > 0 {
			// The summary keeps no key when it matched the leaf (KeySummary.Public).
			pub = fi.Chain[0].PublicKey
		}
		fi.Key = &pki.KeyInfo{Public: pub, Algorithm: it.Key.Algorithm, Format: it.Key.Format}
	}
	if it.CA != nil {
		bx := toX509(it.CA, bundles)
		fi.CA, fi.CAErr = bx.certs, firstErr(fi.CAErr, bx.err)
	}
	return fi
}

// toX509 parses a shared bundle once per conversion.
func toX509(b *Bundle, cache map[*Bundle]bundleX509) bundleX509 {
	if bx, ok := cache[b]; ok {
		return bx
	}
	certs, err := parseDER(b.Certs)
	bx := bundleX509{certs, err}
	cache[b] = bx
	return bx
}

// parseDER parses a summary's certificates. The DER parsed once already; failing now would mean
// a summary built by hand, and must still be an error, not a panic.
func parseDER(cs []Cert) ([]*x509.Certificate, error) {
	return desired.ParseDER(cs, func(c Cert) []byte { return c.DER })
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// ValidRef reports whether ns and name can name a Secret or ConfigMap: a DNS label and a DNS
// subdomain, as the API server validates them.
func ValidRef(ns, name string) bool { return ref.IsDNSLabel(ns) && ref.IsDNSSubdomain(name) }
