package desired

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"time"
)

// Lazy is an item's certificates kept unparsed by their producer (probe/kube): the few facts
// read of every certificate in every round, and the DER to parse when a check or the exposition
// needs the whole certificate. It exists because an x509.Certificate costs ≈ 3 KB: a round that
// parsed every Secret's certificates held ≈ 30 MB of them at 10,000 Secrets and spent ≈ 0.15 s
// building them (docs/benchmarks.md), although an unchanged Secret judged clean before needs only
// its validity, names and fingerprint. An Item with Lazy set has Chain, CA and Key.Public nil;
// Load returns it with them parsed, without keeping them.
type Lazy struct {
	Chain []Cert // leaf first
	// CA is the CA bundle; items carrying the same bundle share the slice (and its Certs), so
	// consumers may key per-bundle work on &CA[0].
	CA []Cert
	// KeyIsLeaf: Key.Public is the leaf's own public key (the private key matched it), filled in
	// by Load.
	KeyIsLeaf bool
}

// Cert is one unparsed certificate.
type Cert struct {
	DER []byte // never modified; shared with the producer
	*Facts
}

// Facts is what every round reads of a certificate: enough for expiry, names, identity.
type Facts struct {
	Serial              *big.Int
	CommonName          string
	DNSNames            []string
	URIs                []string
	IPs                 []net.IP
	NotBefore, NotAfter time.Time
	IsCA                bool
	// SHA256 is the DER's SHA-256 (the fingerprint), taken once: every round names and keys
	// each certificate by it.
	SHA256 [sha256.Size]byte
}

// FactsOf extracts c's Facts. The IP addresses are copied: crypto/x509 leaves them pointing
// into the DER it parsed, which may be a Secret's value the caller must not keep.
func FactsOf(c *x509.Certificate) *Facts {
	f := &Facts{Serial: c.SerialNumber, CommonName: c.Subject.CommonName, DNSNames: slices.Clone(c.DNSNames),
		NotBefore: c.NotBefore, NotAfter: c.NotAfter, IsCA: c.IsCA, SHA256: sha256.Sum256(c.Raw)}
	for _, ip := range c.IPAddresses {
		f.IPs = append(f.IPs, slices.Clone(ip))
	}
	for _, u := range c.URIs {
		f.URIs = append(f.URIs, u.String())
	}
	return f
}

// Fingerprint is the hex SHA-256 of the DER, as pki.Fingerprint gives it.
func (c Cert) Fingerprint() string {
	if c.Facts != nil {
		return hex.EncodeToString(c.SHA256[:])
	}
	sum := sha256.Sum256(c.DER)
	return hex.EncodeToString(sum[:])
}

// Host is a certificate holding only the names: x509's VerifyHostname reads nothing else (no
// common-name fallback since Go 1.15), so matching an SNI needs no parse.
func (f *Facts) Host() *x509.Certificate {
	h := &x509.Certificate{DNSNames: f.DNSNames, IPAddresses: f.IPs}
	for _, u := range f.URIs {
		if p, err := url.Parse(u); err == nil {
			h.URIs = append(h.URIs, p)
		}
	}
	return h
}

// IsLazy reports whether the item's certificates are kept unparsed (Lazy set).
func (it *Item) IsLazy() bool { return it.Lazy != nil }

// HasChain reports whether the item has a certificate chain, parsed or not.
func (it *Item) HasChain() bool {
	if it.Lazy != nil {
		return len(it.Lazy.Chain) > 0
	}
	return len(it.Chain) > 0 && it.Chain[0] != nil
}

// HasCA reports whether the item has a CA bundle, parsed or not.
func (it *Item) HasCA() bool {
	if it.Lazy != nil {
		return len(it.Lazy.CA) > 0
	}
	return len(it.CA) > 0
}

// LeafDER is the leaf's DER, nil without a chain.
func (it *Item) LeafDER() []byte {
	if it.Lazy != nil {
		if len(it.Lazy.Chain) == 0 {
			return nil
		}
		return it.Lazy.Chain[0].DER
	}
	if len(it.Chain) == 0 || it.Chain[0] == nil {
		return nil
	}
	return it.Chain[0].Raw
}

// LeafFingerprint is the leaf's hex SHA-256, "" without a chain: from the facts when the item
// is lazy (no hashing), else from the parsed leaf.
func (it *Item) LeafFingerprint() string {
	if it.Lazy != nil {
		if len(it.Lazy.Chain) == 0 {
			return ""
		}
		return it.Lazy.Chain[0].Fingerprint()
	}
	if len(it.Chain) == 0 || it.Chain[0] == nil {
		return ""
	}
	sum := sha256.Sum256(it.Chain[0].Raw)
	return hex.EncodeToString(sum[:])
}

// LeafFacts are the leaf's facts, nil without a chain.
func (it *Item) LeafFacts() *Facts {
	if it.Lazy != nil {
		if len(it.Lazy.Chain) == 0 {
			return nil
		}
		return it.Lazy.Chain[0].Facts
	}
	if len(it.Chain) == 0 || it.Chain[0] == nil {
		return nil
	}
	return FactsOf(it.Chain[0])
}

// Load returns the item with its certificates parsed: the item itself when it is not lazy, else
// a copy with Chain, CA and Key.Public filled in and Lazy nil. The DER parsed once already (the
// producer checked it); a failure now still becomes ChainErr or CAErr rather than a panic.
// bundles, when not nil, parses each shared CA bundle once across calls (keyed by &CA[0]).
func (it *Item) Load(bundles map[*Cert][]*x509.Certificate) Item {
	if it.Lazy == nil {
		return *it
	}
	out := *it
	out.Lazy = nil
	if len(it.Lazy.Chain) > 0 {
		chain, err := parseAll(it.Lazy.Chain)
		out.Chain = chain
		if out.ChainErr == nil {
			out.ChainErr = err
		}
	}
	if len(it.Lazy.CA) > 0 {
		k := &it.Lazy.CA[0]
		ca, ok := bundles[k]
		var err error
		if !ok {
			ca, err = parseAll(it.Lazy.CA)
			if bundles != nil && err == nil {
				bundles[k] = ca
			}
		}
		out.CA = ca
		if out.CAErr == nil {
			out.CAErr = err
		}
	}
	if it.Key != nil {
		k := *it.Key
		if it.Lazy.KeyIsLeaf && len(out.Chain) > 0 {
			k.Public = out.Chain[0].PublicKey
		}
		out.Key = &k
	}
	return out
}

// LoadCA parses a lazy item's CA bundle into bundles (keyed by &CA[0]) unless it is there: so
// that later Loads with the same map only read it, from several goroutines if need be.
func (it *Item) LoadCA(bundles map[*Cert][]*x509.Certificate) {
	if it.Lazy == nil || len(it.Lazy.CA) == 0 {
		return
	}
	k := &it.Lazy.CA[0]
	if _, ok := bundles[k]; ok {
		return
	}
	if ca, err := parseAll(it.Lazy.CA); err == nil {
		bundles[k] = ca
	}
}

func parseAll(cs []Cert) ([]*x509.Certificate, error) {
	return ParseDER(cs, func(c Cert) []byte { return c.DER })
}

// ParseDER parses certificates kept as DER (a Cert here, probe/kube's summaries), in order; an
// error names the first that does not parse by its position and fingerprint.
func ParseDER[C interface{ Fingerprint() string }](cs []C, der func(C) []byte) ([]*x509.Certificate, error) {
	out := make([]*x509.Certificate, 0, len(cs))
	for i, c := range cs {
		x, err := x509.ParseCertificate(der(c))
		if err != nil {
			return nil, fmt.Errorf("certificate %d (%s): %w", i+1, c.Fingerprint(), err)
		}
		out = append(out, x)
	}
	return out, nil
}

// Unparsed returns obs with every item's parsed certificates turned into their Lazy form, as
// probe/kube produces them: the DER (shared with the parsed certificates), the facts, the public
// key left to Load when it is the leaf's own, and one shared slice per bundle of the same
// certificates. Items already lazy, or holding a nil certificate, are kept as they are.
// Tests use it to hold both forms to the same verdicts and series.
func Unparsed(obs []Observation) []Observation {
	bundles := map[string][]Cert{}
	certsOf := func(cs []*x509.Certificate) []Cert {
		out := make([]Cert, 0, len(cs))
		for _, c := range cs {
			out = append(out, Cert{DER: c.Raw, Facts: FactsOf(c)})
		}
		return out
	}
	out := make([]Observation, len(obs))
	for i, o := range obs {
		o.Items = slices.Clone(o.Items)
		for j := range o.Items {
			it := &o.Items[j]
			if it.Lazy != nil || (len(it.Chain) == 0 && len(it.CA) == 0) || slices.Contains(it.Chain, nil) || slices.Contains(it.CA, nil) {
				continue
			}
			l := &Lazy{Chain: certsOf(it.Chain)}
			if len(it.CA) > 0 {
				k := fmt.Sprint(it.CA) // the certificates' addresses, in order
				if _, ok := bundles[k]; !ok {
					bundles[k] = certsOf(it.CA)
				}
				l.CA = bundles[k]
			}
			if it.Key != nil {
				k := *it.Key
				if len(it.Chain) > 0 && samePublicKey(k.Public, it.Chain[0].PublicKey) {
					l.KeyIsLeaf, k.Public = true, nil
				}
				it.Key = &k
			}
			it.Chain, it.CA, it.Lazy = nil, nil, l
		}
		out[i] = o
	}
	return out
}

// samePublicKey reports whether a and b are equal public keys (crypto.PublicKey's Equal).
func samePublicKey(a, b any) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}
