// Package netbudget owns the process-wide memory budget for what certdrift reads from the network:
// Envoy admin bodies (probe/envoyadmin) and TLS handshakes (probe/tlsprobe). Each response already
// has its own size limit; the budget bounds their sum across every read in flight, whatever
// --concurrency is, so that many hostile or merely large answers at once cannot push the process
// past its memory limit (issue 15). A read that cannot get budget waits for it, within its own
// deadline, and fails with ErrExhausted when it cannot.
//
// Readers grow their lease in chunks as bytes arrive. Deadlock freedom: a reader that holds
// nothing may always wait (it blocks no one); a reader that holds part of the budget may wait for
// more only while some other holder is not itself waiting (so that holder will finish or time out
// and release). When every other holder is waiting too, the request fails at once instead: the
// failing reader releases what it held, and the others go on.
package netbudget

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// DefaultLimit is the process-wide budget: the most bytes held at once by reads from the network.
// It fits one admin body of the maximal 16 MiB (envoyadmin.DefaultMaxBodyBytes; 24 MiB while its
// buffer last doubles) next to hundreds of ordinary ones (a /config_dump with secret and listener
// masks is tens to hundreds of KB). Measured, each MiB of budget costs up to ≈ 3 MiB of RSS (the
// bytes, as much again of garbage before the GC runs, decoding): docs/operate.md ("Memory")
// derives the chart's memory limit from it.
const DefaultLimit = 32 << 20

// ErrExhausted is returned (wrapped) when a read could not get budget: its deadline passed while it
// waited, or waiting would have deadlocked with the other holders.
var ErrExhausted = errors.New("network read memory budget exhausted")

// exhausted is every error Grow returns: it is ErrExhausted (errors.Is), unwraps to the context's
// error when the deadline ended the wait, and reports itself Unreachable, so that the audit calls
// the read a gap in coverage (UNREACHABLE) rather than a malformed answer.
type exhausted struct {
	msg   string
	cause error
}

func (e *exhausted) Error() string {
	if e.cause != nil {
		return ErrExhausted.Error() + ": " + e.msg + ": " + e.cause.Error()
	}
	return ErrExhausted.Error() + ": " + e.msg
}
func (e *exhausted) Is(target error) bool { return target == ErrExhausted }
func (e *exhausted) Unwrap() error        { return e.cause }
func (e *exhausted) Unreachable() bool    { return true }

// Budget is a bound on bytes held by network reads. The zero value is not usable; see New.
type Budget struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	peak    int64
	holders int           // leases holding > 0 bytes
	waiting int           // of those, how many wait for more
	changed chan struct{} // closed and replaced whenever bytes are released
}

// New returns a budget of limit bytes (DefaultLimit if limit <= 0).
func New(limit int64) *Budget {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &Budget{limit: limit, changed: make(chan struct{})}
}

var process = New(DefaultLimit)

// Process is the budget shared by every read of this process: readers given no budget of their
// own use it.
func Process() *Budget { return process }

// Or returns b, or the process budget when b is nil.
func Or(b *Budget) *Budget {
	if b == nil {
		return process
	}
	return b
}

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Stats reports bytes held now and the most ever held at once.
func (b *Budget) Stats() (used, peak int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.peak
}

// Lease is one reader's share. It is not safe for concurrent use; Release is idempotent.
type Lease struct {
	b    *Budget
	held int64
}

// Lease starts a reader's share, holding nothing.
func (b *Budget) Lease() *Lease { return &Lease{b: b} }

// Held is what the lease holds.
func (l *Lease) Held() int64 { return l.held }

// Grow adds n bytes to the lease, waiting for them (within ctx) when the budget is spent. It fails
// with ErrExhausted when n cannot fit in the budget at all, when ctx ends first, or when waiting
// could deadlock (every other holder is waiting too).
func (l *Lease) Grow(ctx context.Context, n int64) error {
	if n <= 0 {
		return nil
	}
	b := l.b
	if l.held+n > b.limit {
		return &exhausted{msg: fmt.Sprintf("%d bytes wanted, the budget is %d bytes in all", l.held+n, b.limit)}
	}
	b.mu.Lock()
	for {
		if b.used+n <= b.limit {
			if l.held == 0 {
				b.holders++
			}
			b.used += n
			b.peak = max(b.peak, b.used)
			l.held += n
			b.mu.Unlock()
			return nil
		}
		if l.held > 0 && b.waiting+1 >= b.holders {
			held, used := l.held, b.used
			b.mu.Unlock()
			return &exhausted{msg: fmt.Sprintf("holding %d bytes, %d more wanted, %d of %d bytes held by readers all waiting for more", held, n, used, b.limit)}
		}
		ch := b.changed
		if l.held > 0 {
			b.waiting++
		}
		b.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		b.mu.Lock()
		if l.held > 0 {
			b.waiting--
		}
		if err != nil {
			used := b.used
			b.mu.Unlock()
			return &exhausted{msg: fmt.Sprintf("waited for %d bytes (%d of %d held by other reads) until the read's deadline", n, used, b.limit), cause: err}
		}
	}
}

// Release returns everything the lease holds.
func (l *Lease) Release() {
	if l.held == 0 {
		return
	}
	b := l.b
	b.mu.Lock()
	b.used -= l.held
	b.holders--
	l.held = 0
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}
