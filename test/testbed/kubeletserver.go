package testbed

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// KubeletClientUser is the user name in the client certificate the testbed's API server presents
// to kubelets (--kubelet-client-certificate); the kubelet server lets only this user in by
// default.
const KubeletClientUser = "kube-apiserver-kubelet-client"

// KubeletServerConfig configures a KubeletServer. Tests and the node agent usually start from
// Testbed.KubeletServerConfig, which fills in the certificates.
type KubeletServerConfig struct {
	// NodeName only labels log records.
	NodeName string
	// Host is the address to listen on and the one the serving certificate must name; the API
	// server dials the Node's InternalIP, so this is that address. Default 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free port (read it back with KubeletServer.Port).
	Port int
	// CertPEM and KeyPEM are the serving certificate and key; the API server verifies them
	// against --kubelet-certificate-authority, so they must be signed by the testbed CA and name
	// Host.
	CertPEM, KeyPEM []byte
	// ClientCAPEM verifies client certificates (the testbed CA).
	ClientCAPEM []byte
	// AllowedUsers are the client-certificate common names allowed to use the kubelet API
	// (everything except /healthz). Default: KubeletClientUser. A real kubelet asks the API
	// server with a SubjectAccessReview; one known caller needs no such round trip.
	AllowedUsers []string
	// LookupPod reports whether this node runs namespace/name and its UID. Unknown pods get a
	// 404 before any stream is opened, as from a kubelet. Nil: every pod is accepted and the
	// dial function decides.
	LookupPod func(namespace, name string) (uid string, ok bool)
	// ContainerLogPath returns the log file of a container (previous: of its last terminated
	// instance), for /containerLogs (kubectl logs). Nil: /containerLogs answers 404.
	ContainerLogPath func(namespace, pod, container string, previous bool) (string, error)
	// StreamIdleTimeout closes a port-forward connection with no traffic for this long
	// (default 30 minutes; the kubelet's is 4 hours).
	StreamIdleTimeout time.Duration
	// StreamCreationTimeout bounds how long a port-forward's data and error streams may take to
	// arrive as a pair (default 30 s, the kubelet's).
	StreamCreationTimeout time.Duration
	// DialTimeout bounds each dial into a pod (default 10 s).
	DialTimeout time.Duration
	// Logger receives request failures. Default: discarded.
	Logger *slog.Logger
}

// DialFunc connects to port of pod namespace/pod; the node agent resolves it to the pod's
// loopback address.
type DialFunc func(ctx context.Context, namespace, pod string, port int32) (net.Conn, error)

// KubeletServer is the part of the kubelet API the API server proxies to: port-forward,
// container logs and health. Create it with NewKubeletServer, then Start; Close stops it and
// every connection it holds, including upgraded streams and the connections dialed into pods.
type KubeletServer struct {
	cfg  KubeletServerConfig
	dial DialFunc
	log  *slog.Logger
	ln   net.Listener
	srv  *http.Server

	mu       sync.Mutex
	conns    map[io.Closer]struct{} // hijacked client connections and dialed pod connections
	closed   bool
	started  bool
	serveErr chan error
}

const (
	defaultStreamIdleTimeout     = 30 * time.Minute
	defaultStreamCreationTimeout = 30 * time.Second
	defaultPodDialTimeout        = 10 * time.Second
	kubeletReadHeaderTimeout     = 10 * time.Second
	kubeletIdleTimeout           = 90 * time.Second
	kubeletMaxHeaderBytes        = 64 << 10
)

// NewKubeletServer validates cfg and listens on cfg.Host:cfg.Port, so Port is known before
// Start (the node agent publishes it in Node.status.daemonEndpoints.kubeletEndpoint).
func NewKubeletServer(cfg KubeletServerConfig, dial func(ctx context.Context, namespace, pod string, port int32) (net.Conn, error)) (*KubeletServer, error) {
	if dial == nil {
		return nil, errors.New("kubelet server: dial function is nil")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("kubelet server: port %d out of range", cfg.Port)
	}
	if len(cfg.AllowedUsers) == 0 {
		cfg.AllowedUsers = []string{KubeletClientUser}
	}
	if cfg.StreamIdleTimeout <= 0 {
		cfg.StreamIdleTimeout = defaultStreamIdleTimeout
	}
	if cfg.StreamCreationTimeout <= 0 {
		cfg.StreamCreationTimeout = defaultStreamCreationTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultPodDialTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "kubelet-server", "node", cfg.NodeName)

	tlsCfg, err := kubeletTLSConfig(cfg)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("kubelet server: listen on %s: %w", addr, err)
	}
	s := &KubeletServer{cfg: cfg, dial: dial, log: log, conns: map[io.Closer]struct{}{}}
	// Hijacked (upgraded) connections are no longer the http.Server's to close: every accepted
	// connection is tracked until it closes, so Close can end port-forward sessions too.
	s.ln = trackingListener{Listener: ln, s: s}
	s.srv = &http.Server{
		Handler:           s.routes(),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: kubeletReadHeaderTimeout,
		IdleTimeout:       kubeletIdleTimeout,
		MaxHeaderBytes:    kubeletMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

func kubeletTLSConfig(cfg KubeletServerConfig) (*tls.Config, error) {
	if len(cfg.CertPEM) == 0 || len(cfg.KeyPEM) == 0 {
		return nil, errors.New("kubelet server: serving certificate or key is empty")
	}
	cert, err := tls.X509KeyPair(cfg.CertPEM, cfg.KeyPEM)
	if err != nil {
		// The error of X509KeyPair never quotes key bytes.
		return nil, fmt.Errorf("kubelet server: load serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.ClientCAPEM) {
		return nil, errors.New("kubelet server: client CA holds no PEM certificate")
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		// Verified when given; /healthz is open and everything else demands a certificate
		// (authorize), so a missing one is a 401 rather than a failed handshake.
		ClientAuth: tls.VerifyClientCertIfGiven,
		MinVersion: tls.VersionTLS12,
		// No "h2": SPDY and WebSocket upgrades need HTTP/1.1.
		NextProtos: []string{"http/1.1"},
	}, nil
}

// Start serves in the background until Close.
func (s *KubeletServer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("kubelet server: start after close")
	}
	if s.started {
		return errors.New("kubelet server: already started")
	}
	s.started = true
	s.serveErr = make(chan error, 1)
	go func() {
		err := s.srv.ServeTLS(s.ln, "", "")
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.serveErr <- err
	}()
	s.log.Info("kubelet server listening", "addr", s.Addr())
	return nil
}

// Addr is host:port of the listener.
func (s *KubeletServer) Addr() string { return s.ln.Addr().String() }

// Port is the listening port, for Node.status.daemonEndpoints.kubeletEndpoint.Port.
func (s *KubeletServer) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Close stops the server, ends every port-forward session and closes the connections dialed
// into pods. It is idempotent.
func (s *KubeletServer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	conns := make([]io.Closer, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	clear(s.conns)
	s.mu.Unlock()

	err := s.srv.Close()
	// Serve closes the listener, unless Close won the race with it or it never ran.
	_ = s.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	if started {
		if serveErr := <-s.serveErr; serveErr != nil {
			err = errors.Join(err, fmt.Errorf("kubelet server on %s: %w", s.Addr(), serveErr))
		}
	}
	return err
}

// track remembers c so Close can close it; it closes c at once if the server is closed.
func (s *KubeletServer) track(c io.Closer) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = c.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
}

func (s *KubeletServer) untrack(c io.Closer) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// trackingListener registers each accepted connection with the server until it is closed.
type trackingListener struct {
	net.Listener
	s *KubeletServer
}

func (l trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, s: l.s}
	l.s.track(tc)
	return tc, nil
}

type trackedConn struct {
	net.Conn
	s    *KubeletServer
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.s.untrack(c) })
	return c.Conn.Close()
}

func (s *KubeletServer) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	})
	// The kubelet registers both methods; the API server proxies with the client's method.
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		mux.Handle(m+" /portForward/{namespace}/{pod}", s.authorize(http.HandlerFunc(s.servePortForward)))
		mux.Handle(m+" /portForward/{namespace}/{pod}/{uid}", s.authorize(http.HandlerFunc(s.servePortForward)))
	}
	mux.Handle("GET /containerLogs/{namespace}/{pod}/{container}", s.authorize(http.HandlerFunc(s.serveContainerLogs)))
	return mux
}

// authorize lets through requests whose verified client certificate names an allowed user.
func (s *KubeletServer) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		user := r.TLS.VerifiedChains[0][0].Subject.CommonName
		if !slices.Contains(s.cfg.AllowedUsers, user) {
			s.log.Warn("kubelet API request refused", "user", user, "path", r.URL.Path)
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, path=%s)", user, r.URL.Path), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// lookup answers for the pod named in the request path: its UID, or false after writing the
// kubelet's 404.
func (s *KubeletServer) lookup(w http.ResponseWriter, r *http.Request) (uid string, ok bool) {
	namespace, pod, wantUID := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid")
	if s.cfg.LookupPod == nil {
		return wantUID, true
	}
	uid, found := s.cfg.LookupPod(namespace, pod)
	if !found {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return "", false
	}
	if wantUID != "" && wantUID != uid {
		http.Error(w, "pod not found", http.StatusNotFound)
		return "", false
	}
	return uid, true
}

// KubeletServerConfig returns the configuration of node nodeName's kubelet server on
// 127.0.0.1: a serving certificate from the testbed CA for 127.0.0.1 and localhost (what the API
// server verifies with --kubelet-certificate-authority when it dials the Node's InternalIP) and
// the testbed CA as client CA (it signed the API server's kubelet client certificate).
func (tb *Testbed) KubeletServerConfig(nodeName string) (KubeletServerConfig, error) {
	certPEM, keyPEM, err := tb.IssueServingCert("kubelet-"+nodeName, "127.0.0.1", "localhost", nodeName)
	if err != nil {
		return KubeletServerConfig{}, fmt.Errorf("issue kubelet serving certificate for node %q: %w", nodeName, err)
	}
	return KubeletServerConfig{
		NodeName:    nodeName,
		Host:        "127.0.0.1",
		CertPEM:     certPEM,
		KeyPEM:      keyPEM,
		ClientCAPEM: tb.CAPEM(),
		Logger:      tb.log,
	}, nil
}
