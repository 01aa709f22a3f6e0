package audit

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
)

// Memo remembers, from one Run to the next, which desired certificates were judged clean and
// until when that verdict holds, so that a round in which nothing changed does not check 10,000
// unchanged Secrets again (the CA_BUNDLE_GAP check is an ECDSA or RSA signature verification per
// Secret: ≈ 90% of a round's judgement at 10,000 Secrets, docs/benchmarks.md). It is the
// per-object cache kube-state-metrics keeps, placed where state may live: gather.Session owns one
// and hands it to Run through Inputs.Memo; Run stays a function of its inputs, since a Memo only
// ever skips work whose outcome it has proved to be "no finding".
//
// What makes that safe:
//   - The key is the content: a SHA-256 over every certificate's DER (chain and CA bundle), the
//     key's public half, the item's name and paths, and the policy the checks read. A Secret
//     whose data changes under the same name, or a new resourceVersion with new data, has another
//     key; nothing is keyed by name or resourceVersion alone.
//   - Only clean verdicts are kept: a certificate with any finding other than expiry is judged in
//     full every round, and so is one with a read error.
//   - Expiry (EXPIRED, EXPIRING, NOT_YET_VALID) is never remembered: Run judges it for every
//     certificate every round (cheap, and its thresholds may depend on the certificate's
//     lifetime as well as the policy). What is remembered — key match, weak crypto, bundle
//     hygiene and the bundle's signature check — depends on the time only through the
//     certificates' own NotBefore and NotAfter (crypto/x509's chain validity, an expired CA in
//     the bundle), so a verdict holds only while the time stays between the same ones.
//   - A verdict not used by a Run is forgotten at its end: a deleted Secret leaves nothing.
//
// A Memo is safe for concurrent use; the zero value is not, use NewMemo. A nil *Memo remembers
// nothing (one-shot audits).
type Memo struct {
	mu      sync.Mutex
	gen     uint64
	entries map[memoKey]memoEntry
	hits    uint64
	misses  uint64
	// chains holds served-chain checks across Runs (pki.ChainCache: keyed by the chain's and the
	// bundle's content, which is all the check reads).
	chains *pki.ChainCache
}

// memoChains bounds the served chains a Memo remembers: far above the distinct chains of a
// fleet (replicas serve one), and at ≈ 1 KB per entry a bounded cost.
const memoChains = 4096

// runChains bounds a Run's own served-chain cache when there is no Memo.
const runChains = 1024

// chainCache is the served-chain cache a Run uses: the Memo's, or a new one for this Run only.
func (m *Memo) chainCache() *pki.ChainCache {
	if m == nil {
		return pki.NewChainCache(runChains)
	}
	return m.chains
}

type memoKey [sha256.Size]byte

type memoEntry struct {
	lo, hi time.Time // the verdict holds for lo < now < hi
	gen    uint64    // the last Run that used it
}

// NewMemo returns an empty Memo.
func NewMemo() *Memo {
	return &Memo{entries: map[memoKey]memoEntry{}, chains: pki.NewChainCache(memoChains)}
}

// MemoStats counts what the last Run found in a Memo, and (Chains) the served-chain checks it
// answered since it was made.
type MemoStats struct {
	Entries, Hits, Misses int
	Chains                pki.ChainCacheStats
}

// Stats says how many verdicts the Memo holds and how many the last Run reused or had to judge.
func (m *Memo) Stats() MemoStats {
	if m == nil {
		return MemoStats{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemoStats{Entries: len(m.entries), Hits: int(m.hits), Misses: int(m.misses), Chains: m.chains.Stats()}
}

// memoRun is one Run's view of the Memo: the generation it marks, and the CA bundles it has
// hashed already (a cluster's Secrets usually share one ca.crt, parsed once per conversion).
type memoRun struct {
	m        *Memo
	gen      uint64
	caHashes map[derRef][sha256.Size]byte
	// policy is the digest of the whole policy the Run judges with, made once per Run: every
	// field goes in, so a policy field added later can never be left out of the key.
	policy    [sha256.Size]byte
	hasPolicy bool
}

// derRef names a certificate's DER by where it is: items that share a bundle share its bytes.
type derRef struct {
	p *byte
	n int
}

func (m *Memo) begin() *memoRun {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	m.hits, m.misses = 0, 0
	return &memoRun{m: m, gen: m.gen, caHashes: map[derRef][sha256.Size]byte{}}
}

// end forgets the verdicts this Run did not use.
func (r *memoRun) end() {
	if r == nil {
		return
	}
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if r.m.gen != r.gen {
		return // another Run began meanwhile: its own end prunes
	}
	for k, e := range r.m.entries {
		if e.gen != r.gen {
			delete(r.m.entries, k)
		}
	}
}

// clean reports whether the desired certificate d, judged at now, is remembered as clean.
func (r *memoRun) clean(k memoKey, now time.Time) bool {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	e, ok := r.m.entries[k]
	if ok && e.lo.Before(now) && now.Before(e.hi) {
		e.gen = r.gen
		r.m.entries[k] = e
		r.m.hits++
		return true
	}
	r.m.misses++
	return false
}

// remember records that d was judged clean at now.
func (r *memoRun) remember(k memoKey, d *desiredCert, now time.Time) {
	lo, hi, ok := validityWindow(d, now)
	if !ok {
		return
	}
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	r.m.entries[k] = memoEntry{lo: lo, hi: hi, gen: r.gen}
}

// validityWindow is the open interval around now in which no certificate of d starts or ends
// its validity. ok is false when now is on a boundary.
func validityWindow(d *desiredCert, now time.Time) (lo, hi time.Time, ok bool) {
	lo, hi = time.Unix(0, 0).Add(-math.MaxInt64), time.Unix(0, 0).Add(math.MaxInt64)
	ok = true
	see := func(b time.Time) {
		switch {
		case b.Equal(now):
			ok = false
		case b.Before(now) && b.After(lo):
			lo = b
		case b.After(now) && b.Before(hi):
			hi = b
		}
	}
	if l := d.it.Lazy; l != nil {
		for _, cs := range [][]desired.Cert{l.Chain, l.CA} {
			for _, c := range cs {
				if c.Facts != nil {
					see(c.NotBefore)
					see(c.NotAfter)
				}
			}
		}
		return lo, hi, ok
	}
	for _, cs := range [][]*x509.Certificate{d.it.Chain, d.it.CA} {
		for _, c := range cs {
			if c == nil {
				continue
			}
			see(c.NotBefore)
			see(c.NotAfter)
		}
	}
	return lo, hi, ok
}

// key is the content key of desired certificate d under policy; ok is false for what is never
// remembered (a read error, no leaf, a public key it cannot encode).
func (r *memoRun) key(d *desiredCert, policy config.Policy) (memoKey, bool) {
	it := d.it
	if !d.hasLeaf() || it.ChainErr != nil || it.KeyErr != nil || it.CAErr != nil {
		return memoKey{}, false
	}
	// The same content gives the same key whether the item came parsed (files) or not
	// (desired.Lazy, the inventory): DER, bundle hashes and key are written alike.
	var chain, ca [][]byte
	keyIsLeaf := false
	if l := it.Lazy; l != nil {
		// The facts carry each certificate's SHA-256: the key takes those rather than hashing
		// the DER again (a different key from the parsed form's, which is never compared).
		for i := range l.Chain {
			if l.Chain[i].Facts == nil {
				return memoKey{}, false
			}
			chain = append(chain, l.Chain[i].SHA256[:])
		}
		for i := range l.CA {
			if l.CA[i].Facts == nil {
				return memoKey{}, false
			}
			ca = append(ca, l.CA[i].SHA256[:])
		}
		keyIsLeaf = l.KeyIsLeaf
	} else {
		for _, c := range it.Chain {
			if c == nil {
				return memoKey{}, false
			}
			chain = append(chain, c.Raw)
		}
		for _, c := range it.CA {
			if c == nil {
				return memoKey{}, false
			}
			ca = append(ca, c.Raw)
		}
		keyIsLeaf = it.Key != nil && sameKey(it.Key.Public, it.Chain[0].PublicKey)
	}
	h := sha256.New()
	var n [8]byte
	num := func(v int64) {
		binary.BigEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	bytes := func(b []byte) { num(int64(len(b))); h.Write(b) }
	str := func(s string) { num(int64(len(s))); h.Write([]byte(s)) }
	if !r.hasPolicy {
		r.policy, r.hasPolicy = sha256.Sum256(fmt.Appendf(nil, "%#v", policy)), true
	}
	h.Write(r.policy[:])
	for _, s := range []string{d.source, d.item, it.CertPath, it.KeyPath, it.CAPath} {
		str(s)
	}
	num(int64(len(chain)))
	for _, der := range chain {
		bytes(der)
	}
	num(int64(len(ca)))
	for _, der := range ca {
		// Bundles are shared between Secrets: each certificate hashed once per Run (by the
		// address of its DER, which the sharing items have in common).
		p := derRef{unsafe.SliceData(der), len(der)}
		ch, ok := r.caHashes[p]
		if !ok {
			ch = sha256.Sum256(der)
			r.caHashes[p] = ch
		}
		h.Write(ch[:])
	}
	if it.Key == nil {
		num(0)
	} else {
		num(1)
		str(it.Key.Algorithm)
		str(it.Key.Format)
		if keyIsLeaf {
			num(1) // the leaf's own public key, already in its DER
		} else {
			der, err := x509.MarshalPKIXPublicKey(it.Key.Public)
			if err != nil {
				return memoKey{}, false
			}
			num(2)
			bytes(der)
		}
	}
	var k memoKey
	h.Sum(k[:0])
	return k, true
}

// sameKey reports whether a and b are the same public key object (the inventory hands the
// audit the leaf's own key when the private key matched it). Only pointer types are compared:
// comparing interfaces holding slices (ed25519) would panic.
func sameKey(a, b any) bool {
	switch a := a.(type) {
	case *ecdsa.PublicKey:
		b, ok := b.(*ecdsa.PublicKey)
		return ok && a == b
	case *rsa.PublicKey:
		b, ok := b.(*rsa.PublicKey)
		return ok && a == b
	}
	return false
}
