package pki

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"slices"
	"sync"
)

// ChainCache remembers what CheckServedChain found for a served chain against a trust bundle,
// so that a fleet serving one chain — every replica of a Deployment, every round of serve — is
// judged once: at 200 Envoy pods the served chain's signature checks were 10% of a round's CPU
// (docs/benchmarks.md, "probe side"), spent on the same few chains again and again.
//
// The key is the content: a SHA-256 over the DER of every served certificate, in order, and of
// every root. A chain or bundle that differs in any byte, order or length is another key.
// Nothing else goes in because nothing else is read: CheckServedChain's issues and path depend
// only on the certificates (signatures, names, order), not on the time or any policy. Its Verify
// result does depend on the time, so Check neither computes nor returns it (that full
// verification is half of an uncached check's cost).
//
// The cache holds at most max entries; when a new entry would exceed that, it starts empty
// again (a fleet has few distinct chains, so a full cache means churn, where keeping old ones
// buys nothing). A ChainCache is safe for concurrent use; a nil *ChainCache checks every chain.
type ChainCache struct {
	mu             sync.Mutex
	max            int
	entries        map[[sha256.Size]byte]ChainReport
	hits, misses   uint64
	resets, stored uint64
}

// NewChainCache returns an empty cache of at most max entries (at least 1).
func NewChainCache(size int) *ChainCache {
	return &ChainCache{max: max(size, 1), entries: map[[sha256.Size]byte]ChainReport{}}
}

// Check is CheckServedChain(chain, roots, …) without the Verify result, from the cache when the
// same chain was checked against the same roots before.
func (c *ChainCache) Check(chain, roots []*x509.Certificate) ChainReport {
	if c == nil {
		return checkServedChain(chain, roots, nil)
	}
	k := chainKey(chain, roots)
	c.mu.Lock()
	rep, ok := c.entries[k]
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	c.mu.Unlock()
	if ok {
		return clone(rep)
	}
	rep = checkServedChain(chain, roots, nil)
	c.mu.Lock()
	if len(c.entries) >= c.max {
		clear(c.entries)
		c.resets++
	}
	c.entries[k] = clone(rep)
	c.stored++
	c.mu.Unlock()
	return rep
}

// ChainCacheStats counts a ChainCache's work since it was made.
type ChainCacheStats struct {
	Entries              int
	Hits, Misses, Resets uint64
}

// Stats says how many reports the cache holds and how often it answered.
func (c *ChainCache) Stats() ChainCacheStats {
	if c == nil {
		return ChainCacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return ChainCacheStats{Entries: len(c.entries), Hits: c.hits, Misses: c.misses, Resets: c.resets}
}

// clone copies the slices so that a caller cannot change a cached report.
func clone(r ChainReport) ChainReport {
	r.Issues, r.Path = slices.Clone(r.Issues), slices.Clone(r.Path)
	return r
}

func chainKey(chain, roots []*x509.Certificate) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	write := func(cs []*x509.Certificate) {
		binary.BigEndian.PutUint64(n[:], uint64(len(cs)))
		h.Write(n[:])
		for _, c := range cs {
			if c == nil {
				binary.BigEndian.PutUint64(n[:], ^uint64(0)) // nil: CheckServedChain skips it, but it is part of what was served
				h.Write(n[:])
				continue
			}
			binary.BigEndian.PutUint64(n[:], uint64(len(c.Raw)))
			h.Write(n[:])
			h.Write(c.Raw)
		}
	}
	write(chain)
	write(roots)
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}
