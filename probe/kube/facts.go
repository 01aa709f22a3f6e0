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
//
// It also keeps each Secret's converted items (LazyObservations) by its summary: a summary is
// immutable and replaced when its Secret changes, so while it lives its items are the same, and
// an unchanged Secret costs a round a map lookup instead of a conversion (at 10,000 Secrets the
// conversion was a sixth of an unchanged round's allocations). The items are shared by the
// rounds that read them, which only read them.
type FactsCache struct {
	mu        sync.Mutex
	cur, prev map[derKey]factsEntry
	// items and prevItems are the converted items of each summary used this round and the last.
	items, prevItems map[*SecretSummary][]desired.Item
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
	return &FactsCache{cur: map[derKey]factsEntry{}, prev: map[derKey]factsEntry{},
		items: map[*SecretSummary][]desired.Item{}, prevItems: map[*SecretSummary][]desired.Item{}}
}

// Round starts a round: entries used since the previous call are kept, the others dropped.
func (c *FactsCache) Round() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, make(map[derKey]factsEntry, len(c.cur))
	c.prevItems, c.items = c.items, make(map[*SecretSummary][]desired.Item, len(c.items))
}

// itemsOf returns the items kept for sec, if any.
func (c *FactsCache) itemsOf(sec *SecretSummary) ([]desired.Item, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	its, ok := c.items[sec]
	if !ok {
		if its, ok = c.prevItems[sec]; ok {
			c.items[sec] = its
		}
	}
	return its, ok
}

// keepItems keeps sec's converted items for the next rounds.
func (c *FactsCache) keepItems(sec *SecretSummary, its []desired.Item) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.items[sec] = its
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
