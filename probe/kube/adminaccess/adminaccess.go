package adminaccess

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
	"github.com/certdrift/certdrift/probe/kube"
)

// Mode says how Dialer reaches an Envoy admin (see the package doc).
type Mode string

// Admin access modes.
const (
	Direct      Mode = "direct"
	PortForward Mode = "port-forward"
	Auto        Mode = "auto"
)

// ParseMode reads a mode from a flag or config value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Direct, PortForward, Auto:
		return m, nil
	case "":
		return Auto, nil
	}
	return "", fmt.Errorf("admin access mode %q: want direct, port-forward or auto", s)
}

// Route is the way one Conn reaches its Envoy.
type Route string

// Routes of an Conn.
const (
	RouteDirect      Route = "direct"
	RoutePortForward Route = "port-forward"
)

// Options configure an Dialer. The zero value is auto mode with the defaults
// below.
type Options struct {
	Mode Mode
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

// Defaults of Options.
const (
	DefaultAdminDialTimeout    = 2 * time.Second
	DefaultAdminSessionTimeout = 10 * time.Second
	DefaultAdminIdleTimeout    = 30 * time.Second
	DefaultAdminMaxSessions    = 8
)

func (o Options) withDefaults() Options {
	if o.Mode == "" {
		o.Mode = Auto
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

// Dialer opens admin access to Envoy targets. It is safe for concurrent use; Close it when
// done.
type Dialer struct {
	opts   Options
	cfg    *rest.Config
	rest   rest.Interface // builds pods/portforward URLs
	direct *http.Client
	log    *slog.Logger

	mu       sync.Mutex
	sessions map[string]*pfSession // by pod UID
	wake     chan struct{}         // closed and replaced whenever a session slot may have freed
	closed   bool
}

// New builds a dialer; cfg is needed for port-forward (and auto) mode.
func New(cfg *rest.Config, opts Options) (*Dialer, error) {
	if _, err := ParseMode(string(opts.Mode)); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	d := &Dialer{opts: opts, log: opts.Logger, sessions: map[string]*pfSession{}, wake: make(chan struct{})}
	dialer := &net.Dialer{Timeout: opts.DialTimeout}
	d.direct = &http.Client{Transport: &http.Transport{
		// Pod IPs never go through an HTTP proxy from the environment.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		MaxIdleConnsPerHost:   4, // a Snapshot has up to four requests in flight
		IdleConnTimeout:       opts.IdleTimeout,
		ResponseHeaderTimeout: envoyAdminHeaderTimeout,
	}}
	if opts.Mode != Direct {
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

// Conn is admin access to one target. Pass BaseURL and HTTPClient to envoyadmin.New; Close
// releases the port-forward session (which stays open for reuse until idle).
type Conn struct {
	BaseURL    string
	HTTPClient *http.Client
	Route      Route
	// Protocol is the port-forward transport: "websocket" (SPDY tunnelled over WebSocket) or
	// "spdy"; empty for direct.
	Protocol string

	once    sync.Once
	release func()
}

// Close releases the connection's session; it does not close the session itself.
func (c *Conn) Close() {
	c.once.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
}

// Open returns admin access to t's admin port, by the dialer's mode.
func (d *Dialer) Open(ctx context.Context, t kube.EnvoyTarget) (*Conn, error) {
	return d.OpenPort(ctx, t, t.AdminPort, t.AdminLocalhostOnly)
}

// OpenPort is Open for another HTTP port of the pod (Envoy Gateway's stats on 19001).
func (d *Dialer) OpenPort(ctx context.Context, t kube.EnvoyTarget, port int, localhostOnly bool) (*Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("envoy admin of %s: no admin port (preset %s; set annotation %s)", t.Key(), t.Preset, kube.AnnotationAdminPort)
	}
	var directErr error
	switch d.opts.Mode {
	case Direct:
		if err := directPossible(t, localhostOnly); err != nil {
			return nil, notReached{fmt.Errorf("envoy admin of %s in direct mode: %w; use --admin-access=auto or port-forward, "+
				"which needs create on pods/portforward in namespace %q (the chart's rbac.portForward)", t.Key(), err, t.Namespace)}
		}
		return d.directConn(t, port), nil
	case Auto:
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

func directPossible(t kube.EnvoyTarget, localhostOnly bool) error {
	if localhostOnly {
		return errors.New("the admin listens on the pod's localhost only")
	}
	if t.PodIP == "" {
		return errors.New("the pod has no IP")
	}
	return nil
}

func (d *Dialer) directConn(t kube.EnvoyTarget, port int) *Conn {
	return &Conn{
		BaseURL:    "http://" + net.JoinHostPort(t.PodIP, strconv.Itoa(port)),
		HTTPClient: d.direct,
		Route:      RouteDirect,
	}
}

// reachable checks that something accepts TCP connections on ip:port.
func (d *Dialer) reachable(ctx context.Context, ip string, port int) error {
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
func (d *Dialer) CloseIdle() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.sessions {
		if s.refs == 0 && s.ready == nil {
			d.closeSessionLocked(s)
		}
	}
}

// Close closes every session; AdminConns still open stop working. Open fails afterwards.
func (d *Dialer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, s := range d.sessions {
		d.closeSessionLocked(s)
	}
	d.direct.CloseIdleConnections()
}

// Sessions is the number of port-forward sessions open (or opening).
func (d *Dialer) Sessions() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sessions)
}
