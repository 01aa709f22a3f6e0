package envoyadmin

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/certdrift/certdrift/probe/envoystate"
)

// Memo keeps, per Envoy and request, the hash of the last answer and what was parsed from it, so
// that a round reading an Envoy whose /certs or /config_dump has not changed skips the parse
// (issue 20: at 200 pods most of a round's CPU went into re-parsing identical admin output), and
// the Envoy's version from /server_info, which is read again only when the process restarted
// (server.uptime in /stats says when it started). Safe for concurrent use; the zero value is
// ready. Pass one Memo to every round's Clients (Options.Memo) and Retain the live Envoys.
//
// What it returns is shared between rounds: the slices are copied, their elements are not, and
// nothing downstream writes into them (the audit sorts copies).
type Memo struct {
	once    sync.Once
	seed    maphash.Seed
	mu      sync.Mutex
	entries map[memoKey]memoEntry
	servers map[string]serverEntry
	// hits and misses count parse calls answered from the memo and parsed afresh.
	hits, misses atomic.Int64
}

type memoKey struct{ envoy, query string }

// memoEntry is one parsed answer. The hash is keyed with a per-process random seed, so a server
// cannot craft a body that collides with an earlier one; the length is compared too.
type memoEntry struct {
	sum  uint64
	size int
	val  any
}

type serverEntry struct {
	version string
	start   time.Time
	read    time.Time // when /server_info said so
}

func (m *Memo) init() {
	m.once.Do(func() {
		m.seed = maphash.MakeSeed()
		m.mu.Lock()
		m.entries, m.servers = map[memoKey]memoEntry{}, map[string]serverEntry{}
		m.mu.Unlock()
	})
}

// parse returns what parse returned for body, reusing the last result for (envoy, query) when
// body is the same as then. Failed parses are not kept: an error is re-derived every time.
func (m *Memo) parse(envoy, query string, body []byte, parse func([]byte) (any, error)) (any, error) {
	if m == nil {
		return parse(body)
	}
	m.init()
	sum := maphash.Bytes(m.seed, body)
	k := memoKey{envoy, query}
	m.mu.Lock()
	e, ok := m.entries[k]
	m.mu.Unlock()
	if ok && e.sum == sum && e.size == len(body) {
		m.hits.Add(1)
		return e.val, nil
	}
	m.misses.Add(1)
	v, err := parse(body)
	if err != nil {
		return v, err
	}
	m.mu.Lock()
	m.entries[k] = memoEntry{sum: sum, size: len(body), val: v}
	m.mu.Unlock()
	return v, nil
}

// server is the version and start time last read from envoy's /server_info.
func (m *Memo) server(envoy string) (serverEntry, bool) {
	if m == nil {
		return serverEntry{}, false
	}
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.servers[envoy]
	return e, ok
}

func (m *Memo) setServer(envoy string, e serverEntry) {
	if m == nil {
		return
	}
	m.init()
	m.mu.Lock()
	m.servers[envoy] = e
	m.mu.Unlock()
}

// Retain keeps the entries of the Envoys in keep (their Options.MemoKey) and drops the rest.
func (m *Memo) Retain(keep []string) {
	m.init()
	want := make(map[string]bool, len(keep))
	for _, k := range keep {
		want[k] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.entries {
		if !want[k.envoy] {
			delete(m.entries, k)
		}
	}
	for k := range m.servers {
		if !want[k] {
			delete(m.servers, k)
		}
	}
}

// Counts says how many parses the memo saved (hits) and how many it could not (misses).
func (m *Memo) Counts() (hits, misses int64) { return m.hits.Load(), m.misses.Load() }

// Len is how many parsed answers are kept.
func (m *Memo) Len() int {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// sameProcess reports whether a start time derived from server.uptime now is the process seen
// before (whose start came from /server_info). Both are whole seconds read at different instants,
// so they may differ by a second either way; and Envoy updates server.uptime only when it flushes
// stats (stats_flush_interval, 5 s by default), so the gauge may be that much behind, which puts
// the derived start later. A restart moves it by the old process's whole lifetime. An Envoy that
// flushes less often only costs a /server_info read per round.
func sameProcess(before, now time.Time) bool {
	d := now.Sub(before)
	return d >= -2*time.Second && d <= maxUptimeLag+2*time.Second
}

// maxUptimeLag is how far behind server.uptime may be: Envoy's default stats flush interval.
const maxUptimeLag = 5 * time.Second

// serverInfoMaxAge bounds how long a version is taken from the Memo: a process that replaced
// another within maxUptimeLag of its start looks like the same one, so /server_info is read
// again at least this often.
const serverInfoMaxAge = 5 * time.Minute

func cloneContexts(v any) []envoystate.TLSContext {
	xs, _ := v.([]envoystate.TLSContext)
	return slices.Clone(xs)
}

func cloneDump(v any) configDump {
	d, _ := v.(configDump)
	d.Secrets, d.Listeners, d.Skipped = slices.Clone(d.Secrets), slices.Clone(d.Listeners), slices.Clone(d.Skipped)
	return d
}
