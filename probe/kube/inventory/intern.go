package inventory

import "sync"

// interner shares one copy of strings that repeat across thousands of objects: namespaces,
// Secret types, field managers. Each decoded object brings its own copy
// of them, and at 10,000 Secrets those copies were about 1 MB of the inventory's heap
// (docs/benchmarks.md). It is bounded: a cluster with more distinct values than max simply
// stops sharing the new ones; it never grows without limit on hostile input.
type interner struct {
	mu  sync.Mutex
	max int
	m   map[string]string
}

func newInterner(max int) *interner { return &interner{max: max, m: map[string]string{}} }

// maxInternLen keeps long unique strings (a subject with many RDNs) out of the table.
const maxInternLen = 256

// get returns the shared copy of s. A nil interner shares nothing.
func (in *interner) get(s string) string {
	if in == nil || s == "" || len(s) > maxInternLen {
		return s
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.m[s]; ok {
		return v
	}
	if len(in.m) < in.max {
		in.m[s] = s
	}
	return s
}
