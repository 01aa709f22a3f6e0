package kube

import (
	"crypto/x509"
	"sync"
	"unsafe"

	"github.com/certdrift/certdrift/probe/desired"
)

// FactsCache keeps the facts (desired.Facts: serial, names, validity) of the certificates of the
// summaries a session's rounds convert, so that a round parses only the certificates of Secrets
// that changed since the last one. The inventory itself keeps only the DER: holding the facts
// there cost every `audit --inventory-only` ≈ 300 bytes per Secret that it never reads.
//
// An entry is found by its DER slice (address and length) and holds that slice, so no other
// certificate can be allocated at that address while the entry lives; summaries are immutable,
// so the same slice always holds the same certificate. Entries not used during a round are
// dropped at the next Round, so deleted Secrets leave nothing behind. Safe for concurrent use; a
// nil *FactsCache parses every certificate it is asked for.
type FactsCache struct {
	mu        sync.Mutex
	cur, prev map[derKey]factsEntry
}

type derKey struct {
	p *byte
	n int
}

type factsEntry struct {
	der   []byte // keeps the address taken
	facts *desired.Facts
}

// NewFactsCache returns an empty cache.
func NewFactsCache() *FactsCache {
	return &FactsCache{cur: map[derKey]factsEntry{}, prev: map[derKey]factsEntry{}}
}

// Round starts a round: entries used since the previous call are kept, the others dropped.
func (c *FactsCache) Round() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, make(map[derKey]factsEntry, len(c.cur))
}

// Len is how many certificates' facts the cache holds.
func (c *FactsCache) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.cur)
	for k := range c.prev {
		if _, ok := c.cur[k]; !ok {
			n++
		}
	}
	return n
}

// facts returns the facts of the certificate der, parsing it unless known; ok is false when it
// does not parse (the inventory parsed it already, so only a summary built by hand gets here).
func (c *FactsCache) facts(der []byte) (*desired.Facts, bool) {
	if len(der) == 0 {
		return nil, false
	}
	k := derKey{unsafe.SliceData(der), len(der)}
	if c != nil {
		c.mu.Lock()
		e, ok := c.cur[k]
		if !ok {
			if e, ok = c.prev[k]; ok {
				c.cur[k] = e
			}
		}
		c.mu.Unlock()
		if ok {
			return e.facts, true
		}
	}
	x, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, false
	}
	f := desired.FactsOf(x)
	if c != nil {
		c.mu.Lock()
		c.cur[k] = factsEntry{der: der, facts: f}
		c.mu.Unlock()
	}
	return f, true
}
