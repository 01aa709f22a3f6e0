package listwatch

import (
	"runtime/debug"
	"sync"
)

// The initial list is the inventory's high-water mark: it builds every summary while the
// objects it decodes and parses (certificates, keys, managedFields) turn into garbage at several
// kilobytes per Secret. With Go's default GOGC=100 the heap grows to twice the live size before
// each collection, so the process's peak memory is set by those few hundred milliseconds, and
// stays in its RSS afterwards. Collecting more often while a list runs, and only then, lowers
// that peak for a little CPU (measured in docs/benchmarks.md); once synced, events are rare and
// the operator's GOGC applies again.

var listGC struct {
	mu     sync.Mutex
	active int // lists running
	prev   int // the GC percent before the first of them
}

// LowerGCForList sets the GC percent to percent (if that is lower than the current setting and
// the GC is on) until the returned function is called. Concurrent lists (one informer per
// namespace) share one lowering; the last to finish restores the previous setting.
// percent <= 0 leaves the GC alone.
func LowerGCForList(percent int) (restore func()) {
	if percent <= 0 {
		return func() {}
	}
	listGC.mu.Lock()
	if listGC.active == 0 {
		prev := debug.SetGCPercent(percent)
		if prev < 0 || prev <= percent {
			// GC off, or already at least as eager: the operator's setting stands.
			debug.SetGCPercent(prev)
		}
		listGC.prev = prev
	}
	listGC.active++
	listGC.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			listGC.mu.Lock()
			defer listGC.mu.Unlock()
			listGC.active--
			if listGC.active == 0 {
				debug.SetGCPercent(listGC.prev)
			}
		})
	}
}
