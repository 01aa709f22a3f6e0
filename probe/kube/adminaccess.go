package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/kubeapi"
)

// AdminMode says how AdminDialer reaches an Envoy admin (see the package doc).
type AdminMode string

// Admin access modes.
const (
	AdminDirect      AdminMode = "direct"
	AdminPortForward AdminMode = "port-forward"
	AdminAuto        AdminMode = "auto"
)

// ParseAdminMode reads a mode from a flag or config value.
func ParseAdminMode(s string) (AdminMode, error) {
	switch m := AdminMode(s); m {
	case AdminDirect, AdminPortForward, AdminAuto:
		return m, nil
	case "":
		return AdminAuto, nil
	}
	return "", fmt.Errorf("admin access mode %q: want direct, port-forward or auto", s)
}

// AdminRoute is the way one AdminConn reaches its Envoy.
type AdminRoute string

// Routes of an AdminConn.
const (
	RouteDirect      AdminRoute = "direct"
	RoutePortForward AdminRoute = "port-forward"
)

// AdminAccessOptions configure an AdminDialer. The zero value is auto mode with the defaults
// below.
type AdminAccessOptions struct {
	Mode AdminMode
	// DialTimeout bounds the direct reachability check and each TCP dial (default 2s).
	DialTimeout time.Duration
	// SessionTimeout bounds setting up one port-forward session (default 10s).
	SessionTimeout time.Duration
	// IdleTimeout closes a port-forward session unused for that long (default 30s).
	IdleTimeout time.Duration
	// MaxSessions bounds the port-forward sessions open at once (default 8): Open waits for a
	// free one, closing idle sessions of other pods first.
	MaxSessions int
	Logger      *slog.Logger
}

// Defaults of AdminAccessOptions.
const (
	DefaultAdminDialTimeout    = 2 * time.Second
	DefaultAdminSessionTimeout = 10 * time.Second
	DefaultAdminIdleTimeout    = 30 * time.Second
	DefaultAdminMaxSessions    = 8
)

func (o AdminAccessOptions) withDefaults() AdminAccessOptions {
	if o.Mode == "" {
		o.Mode = AdminAuto
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultAdminDialTimeout
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultAdminSessionTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultAdminIdleTimeout
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultAdminMaxSessions
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// AdminDialer opens admin access to Envoy targets. It is safe for concurrent use; Close it when
// done.
type AdminDialer struct {
	opts   AdminAccessOptions
	cfg    *rest.Config
	rest   rest.Interface // builds pods/portforward URLs
	direct *http.Client
	log    *slog.Logger

	mu       sync.Mutex
	sessions map[string]*pfSession // by pod UID
	wake     chan struct{}         // closed and replaced whenever a session slot may have freed
	closed   bool
}

// NewAdminDialer builds a dialer; cfg is needed for port-forward (and auto) mode.
func NewAdminDialer(cfg *rest.Config, opts AdminAccessOptions) (*AdminDialer, error) {
	if _, err := ParseAdminMode(string(opts.Mode)); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	d := &AdminDialer{opts: opts, log: opts.Logger, sessions: map[string]*pfSession{}, wake: make(chan struct{})}
	dialer := &net.Dialer{Timeout: opts.DialTimeout}
	d.direct = &http.Client{Transport: &http.Transport{
		// Pod IPs never go through an HTTP proxy from the environment.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       opts.IdleTimeout,
		ResponseHeaderTimeout: envoyAdminHeaderTimeout,
	}}
	if opts.Mode != AdminDirect {
		if cfg == nil {
			return nil, fmt.Errorf("admin access mode %s needs a Kubernetes client configuration", opts.Mode)
		}
		d.cfg = rest.CopyConfig(cfg)
		if d.cfg.UserAgent == "" {
			d.cfg.UserAgent = "certdrift-admin-access"
		}
		cs, err := kubeapi.NewForConfig(d.cfg)
		if err != nil {
			return nil, fmt.Errorf("admin access: build client for %s: %w", cfg.Host, err)
		}
		d.rest = cs.CoreV1().RESTClient()
	}
	return d, nil
}

// envoyAdminHeaderTimeout is a backstop for requests made without a deadline.
const envoyAdminHeaderTimeout = 30 * time.Second

// AdminConn is admin access to one target. Pass BaseURL and HTTPClient to envoyadmin.New; Close
// releases the port-forward session (which stays open for reuse until idle).
type AdminConn struct {
	BaseURL    string
	HTTPClient *http.Client
	Route      AdminRoute
	// Protocol is the port-forward transport: "websocket" (SPDY tunnelled over WebSocket) or
	// "spdy"; empty for direct.
	Protocol string

	once    sync.Once
	release func()
}

// Close releases the connection's session; it does not close the session itself.
func (c *AdminConn) Close() {
	c.once.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
}

// Open returns admin access to t's admin port, by the dialer's mode.
func (d *AdminDialer) Open(ctx context.Context, t EnvoyTarget) (*AdminConn, error) {
	return d.OpenPort(ctx, t, t.AdminPort, t.AdminLocalhostOnly)
}

// OpenPort is Open for another HTTP port of the pod (Envoy Gateway's stats on 19001).
func (d *AdminDialer) OpenPort(ctx context.Context, t EnvoyTarget, port int, localhostOnly bool) (*AdminConn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("envoy admin of %s: no admin port (preset %s; set annotation %s)", t.Key(), t.Preset, AnnotationAdminPort)
	}
	var directErr error
	switch d.opts.Mode {
	case AdminDirect:
		if err := directPossible(t, localhostOnly); err != nil {
			return nil, notReached{fmt.Errorf("envoy admin of %s in direct mode: %w; use --admin-access=auto or port-forward, "+
				"which needs create on pods/portforward in namespace %q (the chart's rbac.portForward)", t.Key(), err, t.Namespace)}
		}
		return d.directConn(t, port), nil
	case AdminAuto:
		if directErr = directPossible(t, localhostOnly); directErr == nil {
			if directErr = d.reachable(ctx, t.PodIP, port); directErr == nil {
				return d.directConn(t, port), nil
			}
		}
	}
	c, err := d.portForward(ctx, t, port)
	if err != nil {
		if directErr != nil {
			return nil, fmt.Errorf("envoy admin of %s: direct: %v; port-forward: %w", t.Key(), directErr, err)
		}
		return nil, fmt.Errorf("envoy admin of %s: %w", t.Key(), err)
	}
	return c, nil
}

// notReached marks an admin that access could not reach at all (direct mode and a
// localhost-only admin): the audit reports it UNREACHABLE, not as a malformed answer.
type notReached struct{ error }

func (e notReached) Unwrap() error   { return e.error }
func (notReached) Unreachable() bool { return true }

func directPossible(t EnvoyTarget, localhostOnly bool) error {
	if localhostOnly {
		return errors.New("the admin listens on the pod's localhost only")
	}
	if t.PodIP == "" {
		return errors.New("the pod has no IP")
	}
	return nil
}

func (d *AdminDialer) directConn(t EnvoyTarget, port int) *AdminConn {
	return &AdminConn{
		BaseURL:    "http://" + net.JoinHostPort(t.PodIP, strconv.Itoa(port)),
		HTTPClient: d.direct,
		Route:      RouteDirect,
	}
}

// reachable checks that something accepts TCP connections on ip:port.
func (d *AdminDialer) reachable(ctx context.Context, ip string, port int) error {
	ctx, cancel := context.WithTimeout(ctx, d.opts.DialTimeout)
	defer cancel()
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return conn.Close()
}

// CloseIdle closes every port-forward session not in use: call it at the end of a round.
func (d *AdminDialer) CloseIdle() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.sessions {
		if s.refs == 0 && s.ready == nil {
			d.closeSessionLocked(s)
		}
	}
}

// Close closes every session; AdminConns still open stop working. Open fails afterwards.
func (d *AdminDialer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, s := range d.sessions {
		d.closeSessionLocked(s)
	}
	d.direct.CloseIdleConnections()
}

// Sessions is the number of port-forward sessions open (or opening).
func (d *AdminDialer) Sessions() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sessions)
}
