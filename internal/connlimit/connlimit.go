// Package connlimit caps the connections an http.Server holds open, for certdrift's metrics and
// probe ports (--web.max-connections).
//
// Prometheus caps with golang.org/x/net/netutil.LimitListener, which stops calling Accept at the
// cap: every further connection, the scrape included, then waits in the kernel's accept queue
// behind thousands of idle ones until each of those times out. Here Accept goes on, and a
// connection over the cap takes the slot of the one that has been idle the longest (a keep-alive
// connection between requests, or one that has sent nothing yet); a client of the evicted one
// only has to reconnect. Connections busy with a request are never evicted; when every slot is
// busy the new connection is closed at once. So a flood of idle connections costs at most the cap
// in file descriptors, and a scrape still gets in.
package connlimit

import (
	"container/list"
	"net"
	"net/http"
	"sync"
)

// Limiter holds the connections of one server. Use Listener for each of its listeners and set
// the server's ConnState to ConnState.
type Limiter struct {
	max int

	mu     sync.Mutex
	conns  map[*conn]*list.Element // every open admitted connection; the element when evictable
	idle   *list.List              // evictable connections, longest idle first
	shed   uint64
	evict  uint64
	closed bool
}

// New returns a Limiter for at most max open connections (max ≥ 1).
func New(max int) *Limiter {
	if max < 1 {
		max = 1
	}
	return &Limiter{max: max, conns: map[*conn]*list.Element{}, idle: list.New()}
}

// Stats is what the limiter has done, for logs and tests.
type Stats struct {
	Open             int
	Evicted, Refused uint64
}

// Stats returns the current counts.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: len(l.conns), Evicted: l.evict, Refused: l.shed}
}

// Listener wraps inner so that its connections count against the limit.
func (l *Limiter) Listener(inner net.Listener) net.Listener { return &listener{Listener: inner, l: l} }

type listener struct {
	net.Listener
	l *Limiter
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := &conn{Conn: c, l: ln.l}
		victim, ok := ln.l.admit(tc)
		if victim != nil {
			victim.Close()
		}
		if ok {
			return tc, nil
		}
		c.Close()
	}
}

// admit registers c, evicting the longest-idle connection when at the cap. ok is false when
// every slot is busy with a request.
func (l *Limiter) admit(c *conn) (victim *conn, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, false
	}
	if len(l.conns) >= l.max {
		front := l.idle.Front()
		if front == nil {
			l.shed++
			return nil, false
		}
		victim = front.Value.(*conn)
		l.idle.Remove(front)
		delete(l.conns, victim)
		l.evict++
	}
	// A new connection has sent nothing yet: evictable until its first request arrives.
	l.conns[c] = l.idle.PushBack(c)
	return victim, true
}

// Close refuses every further connection and closes those not busy with a request, for a
// shutdown: http.Server.Shutdown waits for a connection that has sent nothing yet for up to five
// seconds, so a flood of silent connections would otherwise hold a terminating process past its
// grace period. Requests in progress finish. A nil Limiter (no such port) has nothing to close.
func (l *Limiter) Close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.closed = true
	var victims []*conn
	for e := l.idle.Front(); e != nil; e = e.Next() {
		victims = append(victims, e.Value.(*conn))
	}
	l.mu.Unlock()
	for _, c := range victims {
		c.Close()
	}
}

// ConnState is the http.Server.ConnState hook that tells busy connections from idle ones. Chain
// it if the server has one of its own.
func (l *Limiter) ConnState(nc net.Conn, s http.ConnState) {
	c := unwrap(nc)
	if c == nil || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, open := l.conns[c]
	if !open {
		return
	}
	switch s {
	case http.StateActive:
		if e != nil {
			l.idle.Remove(e)
			l.conns[c] = nil
		}
	case http.StateIdle:
		if e != nil {
			l.idle.Remove(e)
		}
		l.conns[c] = l.idle.PushBack(c)
	case http.StateHijacked, http.StateClosed:
		l.forget(c)
	}
}

func (l *Limiter) forget(c *conn) {
	if e, open := l.conns[c]; open {
		if e != nil {
			l.idle.Remove(e)
		}
		delete(l.conns, c)
	}
}

// unwrap finds our conn under a *tls.Conn (exporter-toolkit serves TLS on our listener).
func unwrap(nc net.Conn) *conn {
	for i := 0; i < 4 && nc != nil; i++ {
		if c, ok := nc.(*conn); ok {
			return c
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		nc = u.NetConn()
	}
	return nil
}

type conn struct {
	net.Conn
	l    *Limiter
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.forget(c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
