package netbudget

import (
	"context"
	"io"
	"net"
)

// minChunk is the first buffer of a read whose size is not announced, and the step by which a
// connection's lease grows.
const minChunk = 32 << 10

// Shrink returns n bytes of the lease (at most what it holds).
func (l *Lease) Shrink(n int64) {
	n = min(n, l.held)
	if n <= 0 {
		return
	}
	b := l.b
	b.mu.Lock()
	b.used -= n
	l.held -= n
	if l.held == 0 {
		b.holders--
	}
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// ReadAll reads r to its end or to max+1 bytes, whichever comes first, into a buffer the lease
// pays for: sizeHint (a Content-Length; <= 0 when unknown) sizes the first buffer, which otherwise
// starts small and doubles. The lease holds the buffer's capacity when ReadAll returns; the caller
// releases it when done with the bytes. A read past max returns max+1 bytes: the caller decides
// what a too-large body means. While a buffer doubles, the old and the new one are both held: a
// budget must be at least 1.5 times max for a read of max bytes to fit.
func (l *Lease) ReadAll(ctx context.Context, r io.Reader, max, sizeHint int64) ([]byte, error) {
	size := int64(minChunk)
	if sizeHint > 0 {
		size = sizeHint + 1 // +1 sees a body longer than announced without a second buffer
	}
	size = min(size, max+1)
	if err := l.Grow(ctx, size); err != nil {
		return nil, err
	}
	buf := make([]byte, 0, size)
	for {
		if int64(len(buf)) == int64(cap(buf)) {
			if int64(len(buf)) > max {
				return buf, nil
			}
			next := min(2*int64(cap(buf)), max+1)
			// Old and new buffers both exist while copying: hold both, then give the old back.
			if err := l.Grow(ctx, next); err != nil {
				return buf, err
			}
			nb := make([]byte, len(buf), next)
			copy(nb, buf)
			l.Shrink(int64(cap(buf)))
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// Conn charges what is read from a connection to a lease, in steps of 32 KiB, factor times over
// (what is read becomes parsed structures too: a certificate's DER is kept in x509.Certificate.Raw
// alongside its parsed fields). A read that cannot get budget fails, which fails the handshake.
type Conn struct {
	net.Conn
	ctx    context.Context
	lease  *Lease
	factor int64
	read   int64
	err    error
}

// Err is the budget error that failed a read, if one did: the caller's own error (a handshake
// ended by its context) may hide it.
func (c *Conn) Err() error { return c.err }

// NewConn wraps c; release the lease when done with what was read.
func NewConn(ctx context.Context, c net.Conn, lease *Lease, factor int64) *Conn {
	return &Conn{Conn: c, ctx: ctx, lease: lease, factor: max(factor, 1)}
}

func (c *Conn) Read(p []byte) (int, error) {
	// Charge before the bytes arrive: a step covers any one read of up to 32 KiB, and p is cut so
	// that no read can overrun what is held.
	if (c.read+int64(len(p)))*c.factor > c.lease.Held() {
		if err := c.lease.Grow(c.ctx, minChunk*c.factor); err != nil {
			c.err = err
			return 0, err
		}
	}
	if room := c.lease.Held()/c.factor - c.read; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	return n, err
}
