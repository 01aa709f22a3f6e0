package adminaccess

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/certdrift/certdrift/probe/kube"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	//lint:ignore SA1019 client-go v0.37's portforward and spdy packages still take and return this package's Dialer, Connection and Stream, which are distinct types from k8s.io/streaming's
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"
)

// pfSession is one port-forward connection to a pod through the API server. Every TCP
// connection the HTTP client opens is a pair of streams on it (the protocol kubectl speaks:
// an error stream and a data stream sharing a request ID), so no local port is ever opened.
// All fields but nextID are guarded by Dialer.mu.
type pfSession struct {
	key, ns, pod string
	ready        chan struct{} // non-nil while the session is being dialled
	err          error         // set before ready is closed
	conn         httpstream.Connection
	protocol     string
	refs         int
	idle         *time.Timer
	clients      map[int]*http.Client
	closed       bool
	done         chan struct{}
	nextID       atomic.Int64
}

// PortForwardAccessError says that RBAC refused the port-forward that admin access needs.
type PortForwardAccessError struct {
	Namespace, Pod string
	Err            error
}

func (e *PortForwardAccessError) Error() string {
	return fmt.Sprintf("cannot create pods/portforward for pod %q in namespace %q: forbidden; "+
		"port-forward admin access needs a Role in namespace %q granting create on pods/portforward "+
		"(SPDY; add get for the WebSocket transport), or use direct admin access: %v",
		e.Pod, e.Namespace, e.Namespace, e.Err)
}

func (e *PortForwardAccessError) Unwrap() error { return e.Err }

// Unreachable: the admin was never reached, so the audit reports it UNREACHABLE (with this
// message naming the permission), not as a malformed answer (audit/envoy.go).
func (e *PortForwardAccessError) Unreachable() bool { return true }

func (d *Dialer) portForward(ctx context.Context, t kube.EnvoyTarget, port int) (*Conn, error) {
	s, err := d.acquire(ctx, t)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	client := d.clientLocked(s, port)
	d.mu.Unlock()
	return &Conn{
		// The host names the pod for people reading errors; the transport ignores it.
		BaseURL:    fmt.Sprintf("http://%s.%s.port-forward:%d", t.Pod, t.Namespace, port),
		HTTPClient: client,
		Route:      RoutePortForward,
		Protocol:   s.protocol,
		release:    func() { d.release(s) },
	}, nil
}

// acquire returns the pod's session with a reference taken, dialling it if needed; it waits
// for a free slot when MaxSessions are open and none is idle.
func (d *Dialer) acquire(ctx context.Context, t kube.EnvoyTarget) (*pfSession, error) {
	key := t.UID
	if key == "" {
		key = t.Key()
	}
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, errors.New("admin dialer is closed")
		}
		if s := d.sessions[key]; s != nil && !s.closed {
			if ch := s.ready; ch != nil {
				d.mu.Unlock()
				select {
				case <-ch:
					if s.err != nil {
						return nil, s.err
					}
					continue
				case <-ctx.Done():
					return nil, fmt.Errorf("wait for port-forward session to %s: %w", t.Key(), ctx.Err())
				}
			}
			s.refs++
			if s.idle != nil {
				s.idle.Stop()
				s.idle = nil
			}
			d.mu.Unlock()
			return s, nil
		}
		if len(d.sessions) >= d.opts.MaxSessions {
			if victim := d.oldestIdleLocked(); victim != nil {
				d.closeSessionLocked(victim)
			} else {
				ch := d.wake
				n := len(d.sessions)
				d.mu.Unlock()
				select {
				case <-ch:
					continue
				case <-ctx.Done():
					return nil, fmt.Errorf("wait for a free port-forward session (%d in use) for %s: %w", n, t.Key(), ctx.Err())
				}
			}
		}
		s := &pfSession{key: key, ns: t.Namespace, pod: t.Pod, ready: make(chan struct{}), refs: 1,
			clients: map[int]*http.Client{}, done: make(chan struct{})}
		d.sessions[key] = s
		d.mu.Unlock()

		conn, proto, err := d.dialSession(ctx, t.Namespace, t.Pod)

		d.mu.Lock()
		if err == nil && s.closed {
			conn.Close()
			err = fmt.Errorf("port-forward session to %s closed while it was opening", t.Key())
		}
		s.err, s.conn, s.protocol = err, conn, proto
		ch := s.ready
		s.ready = nil
		if err != nil {
			s.closed = true
			if d.sessions[key] == s {
				delete(d.sessions, key)
			}
			d.wakeLocked()
		} else {
			go d.watch(s)
			d.log.Debug("port-forward session opened", "namespace", t.Namespace, "pod", t.Pod, "protocol", proto)
		}
		close(ch)
		d.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

func (d *Dialer) oldestIdleLocked() *pfSession {
	var victim *pfSession
	for _, s := range d.sessions {
		if s.refs == 0 && s.ready == nil && (victim == nil || s.key < victim.key) {
			victim = s
		}
	}
	return victim
}

func (d *Dialer) release(s *pfSession) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s.refs--
	if s.refs > 0 || s.closed {
		return
	}
	s.idle = time.AfterFunc(d.opts.IdleTimeout, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if s.refs == 0 {
			d.closeSessionLocked(s)
		}
	})
	d.wakeLocked()
}

// watch forgets a session whose connection ended (the pod went, the API server closed it).
func (d *Dialer) watch(s *pfSession) {
	select {
	case <-s.conn.CloseChan():
	case <-s.done:
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closeSessionLocked(s)
}

func (d *Dialer) closeSessionLocked(s *pfSession) {
	if d.sessions[s.key] == s {
		delete(d.sessions, s.key)
	}
	d.wakeLocked()
	if s.closed {
		return
	}
	s.closed = true
	if s.idle != nil {
		s.idle.Stop()
	}
	if s.conn != nil {
		_ = s.conn.Close()
		close(s.done)
	}
	for _, c := range s.clients {
		c.CloseIdleConnections()
	}
}

func (d *Dialer) wakeLocked() {
	close(d.wake)
	d.wake = make(chan struct{})
}

// clientLocked is the session's HTTP client for one port of the pod.
func (d *Dialer) clientLocked(s *pfSession, port int) *http.Client {
	if c := s.clients[port]; c != nil {
		return c
	}
	c := &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return s.dialStream(ctx, port)
		},
		MaxIdleConnsPerHost:   4, // a Snapshot has up to four requests in flight
		IdleConnTimeout:       d.opts.IdleTimeout,
		ResponseHeaderTimeout: envoyAdminHeaderTimeout,
	}}
	s.clients[port] = c
	return c
}

// dialSession upgrades a pods/portforward request: WebSocket (SPDY tunnelled through it) first,
// plain SPDY when the upgrade fails, as kubectl does.
func (d *Dialer) dialSession(ctx context.Context, ns, pod string) (httpstream.Connection, string, error) {
	u := d.rest.Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	tunnel, err := portforward.NewSPDYOverWebsocketDialer(u, d.cfg)
	if err != nil {
		return nil, "", fmt.Errorf("port-forward to %s/%s: websocket dialer: %w", ns, pod, err)
	}
	rt, upgrader, err := spdy.RoundTripperFor(d.cfg)
	if err != nil {
		return nil, "", fmt.Errorf("port-forward to %s/%s: spdy dialer: %w", ns, pod, err)
	}
	var fellBack atomic.Bool
	dialer := portforward.NewFallbackDialer(tunnel, spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u),
		func(err error) bool {
			// client-go v0.37's WebSocket round tripper returns k8s.io/streaming's
			// UpgradeFailureError, which apimachinery's IsUpgradeFailure (what
			// NewFallbackDialer's callers were told to use) does not recognise: check both,
			// or a refused WebSocket upgrade (403 for want of get) never falls back to SPDY.
			if streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err) ||
				httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err) {
				fellBack.Store(true)
				return true
			}
			return false
		})

	ctx, cancel := context.WithTimeout(ctx, d.opts.SessionTimeout)
	defer cancel()
	type result struct {
		conn httpstream.Connection
		err  error
	}
	res := make(chan result, 1)
	// The dialers take no context: a late connection is closed by the goroutine below.
	go func() {
		conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
		res <- result{conn, err}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			return nil, "", classifyPortForwardErr(ns, pod, r.err)
		}
		proto := "websocket"
		if fellBack.Load() {
			proto = "spdy"
		}
		return r.conn, proto, nil
	case <-ctx.Done():
		go func() {
			if r := <-res; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, "", fmt.Errorf("port-forward to %s/%s through %s: %w", ns, pod, d.cfg.Host, ctx.Err())
	}
}

func classifyPortForwardErr(ns, pod string, err error) error {
	msg := err.Error()
	if apierrors.IsForbidden(err) || strings.Contains(msg, "forbidden") || strings.Contains(msg, "403 Forbidden") {
		return &PortForwardAccessError{Namespace: ns, Pod: pod, Err: err}
	}
	return fmt.Errorf("port-forward to %s/%s: %w", ns, pod, err)
}

// dialStream opens one stream pair to port in the pod.
func (s *pfSession) dialStream(ctx context.Context, port int) (net.Conn, error) {
	id := s.nextID.Add(1)
	type result struct {
		errS, data httpstream.Stream
		err        error
	}
	res := make(chan result, 1)
	go func() {
		h := http.Header{}
		h.Set(corev1.StreamType, corev1.StreamTypeError)
		h.Set(corev1.PortHeader, strconv.Itoa(port))
		h.Set(corev1.PortForwardRequestIDHeader, strconv.FormatInt(id, 10))
		errS, err := s.conn.CreateStream(h)
		if err != nil {
			res <- result{err: err}
			return
		}
		// Nothing is ever sent on the error stream.
		_ = errS.Close()
		h.Set(corev1.StreamType, corev1.StreamTypeData)
		data, err := s.conn.CreateStream(h)
		if err != nil {
			_ = errS.Reset()
			s.conn.RemoveStreams(errS)
			res <- result{err: err}
			return
		}
		res <- result{errS: errS, data: data}
	}()
	addr := pfAddr(fmt.Sprintf("%s/%s:%d", s.ns, s.pod, port))
	select {
	case r := <-res:
		if r.err != nil {
			return nil, fmt.Errorf("port-forward stream to %s: %w", addr, r.err)
		}
		return newStreamConn(s.conn, r.errS, r.data, addr), nil
	case <-ctx.Done():
		go func() {
			if r := <-res; r.err == nil {
				_ = r.data.Reset()
				_ = r.errS.Reset()
				s.conn.RemoveStreams(r.errS, r.data)
			}
		}()
		return nil, fmt.Errorf("port-forward stream to %s: %w", addr, ctx.Err())
	}
}

// pfAddr names a port-forward endpoint as a net.Addr.
type pfAddr string

func (a pfAddr) Network() string { return "port-forward" }
func (a pfAddr) String() string  { return string(a) }

// streamConn is a net.Conn over one port-forward data stream. The pod side reports a failed
// connect (nothing listening) on the error stream and closes the data stream; Read turns that
// EOF into the reported error.
type streamConn struct {
	conn       httpstream.Connection
	errS, data httpstream.Stream
	addr       pfAddr

	remote     chan struct{} // closed once remoteErr is set
	remoteErr  error
	gotData    atomic.Bool
	closeOnce  sync.Once
	mu         sync.Mutex
	deadline   *time.Timer
	timedOut   atomic.Bool
	closedByUs atomic.Bool
}

// maxRemoteError bounds the error message read from the pod side.
const maxRemoteError = 4 << 10

func newStreamConn(conn httpstream.Connection, errS, data httpstream.Stream, addr pfAddr) *streamConn {
	c := &streamConn{conn: conn, errS: errS, data: data, addr: addr, remote: make(chan struct{})}
	go func() {
		msg, _ := io.ReadAll(io.LimitReader(errS, maxRemoteError))
		if m := strings.TrimSpace(string(msg)); m != "" {
			c.remoteErr = fmt.Errorf("port-forward to %s: %s", addr, m)
		}
		close(c.remote)
	}()
	return c
}

// errorWait is how long Read waits, on an EOF before any data, for the pod side's error
// message, which travels on its own stream.
const errorWait = 500 * time.Millisecond

func (c *streamConn) Read(p []byte) (int, error) {
	n, err := c.data.Read(p)
	if n > 0 {
		c.gotData.Store(true)
	}
	if err != nil && c.timedOut.Load() {
		return n, os.ErrDeadlineExceeded
	}
	if errors.Is(err, io.EOF) && !c.gotData.Load() && !c.closedByUs.Load() {
		select {
		case <-c.remote:
			if c.remoteErr != nil {
				return n, c.remoteErr
			}
		case <-time.After(errorWait):
		}
	}
	return n, err
}

func (c *streamConn) Write(p []byte) (int, error) {
	n, err := c.data.Write(p)
	if err != nil && c.timedOut.Load() {
		return n, os.ErrDeadlineExceeded
	}
	return n, err
}

func (c *streamConn) Close() error {
	c.closeOnce.Do(func() {
		c.closedByUs.Store(true)
		c.mu.Lock()
		if c.deadline != nil {
			c.deadline.Stop()
		}
		c.mu.Unlock()
		_ = c.data.Reset()
		_ = c.errS.Reset()
		c.conn.RemoveStreams(c.errS, c.data)
	})
	return nil
}

func (c *streamConn) LocalAddr() net.Addr  { return pfAddr("certdrift") }
func (c *streamConn) RemoteAddr() net.Addr { return c.addr }

// SetDeadline aborts the stream when t passes: a stream cannot be woken without being reset, so
// unlike a TCP connection it cannot be used after a deadline has passed.
func (c *streamConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadline != nil {
		c.deadline.Stop()
		c.deadline = nil
	}
	if t.IsZero() {
		return nil
	}
	expire := func() {
		c.timedOut.Store(true)
		_ = c.data.Reset()
	}
	if d := time.Until(t); d > 0 {
		c.deadline = time.AfterFunc(d, expire)
	} else {
		expire()
	}
	return nil
}

func (c *streamConn) SetReadDeadline(t time.Time) error  { return c.SetDeadline(t) }
func (c *streamConn) SetWriteDeadline(t time.Time) error { return c.SetDeadline(t) }
