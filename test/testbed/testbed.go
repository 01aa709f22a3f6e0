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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options configure Start. The zero value is ready to use.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and kubectl. Default:
	// $CERTDRIFT_KUBE_BIN_DIR, else .cache/kube/<KubeVersion>/ at the repository root.
	BinDir string
	// Dir receives the PKI, etcd data, kubeconfigs and logs. Default: a new temporary directory,
	// removed by Stop. A caller-supplied Dir is left in place.
	Dir string
	// ServiceClusterIPRange is the Service IP range (default 10.96.0.0/16).
	ServiceClusterIPRange string
	// StartTimeout bounds the whole start (default 2 minutes: a cold page cache on a busy
	// machine is slow; a warm start takes seconds).
	StartTimeout time.Duration
	// Logger receives progress messages. Default: discarded.
	Logger *slog.Logger
	// Nodes is how many node agents (testbed-node-1, ...) run pods; default 1, negative for
	// none (pods then stay Pending, unbound). See node.go.
	Nodes int
	// VolumeSyncDelay is how often the nodes re-project Secret and ConfigMap volumes
	// (default 2s; the kubelet's is up to about a minute).
	VolumeSyncDelay time.Duration
	// CertdriftBinary is the certdrift executable the nodes run for pods whose image is
	// certdrift's (e.g. ghcr.io/certdrift/certdrift), with the pod's ServiceAccount token at
	// the in-cluster path (containers_certdrift.go). Tests build it from ./cmd/certdrift.
	CertdriftBinary string
	// EnvoyPaths is how Envoy pods see their volumes (envoypaths.go): PathsAuto (the default)
	// uses PathsMountNS, each Envoy in its own mount namespace with its volumes at their
	// mountPaths, when the test runs as root, and PathsRewrite (mount paths rewritten to node
	// paths) otherwise; $CERTDRIFT_TESTBED_PATHS=mountns|rewrite overrides the default.
	EnvoyPaths PathMode
}

// Testbed is a running control plane. Its methods are safe for concurrent use.
type Testbed struct {
	// Dir holds everything the testbed wrote; logs are in Dir/logs/<component>.log.
	Dir string
	// BinDir is where the binaries came from.
	BinDir string
	// KubeconfigPath is an admin kubeconfig (user "testbed-admin" in system:masters).
	KubeconfigPath string
	// Config is the admin client configuration; Client is built from it.
	Config *rest.Config
	Client kubernetes.Interface
	// StartDuration is how long Start took, from the first process to a usable cluster.
	StartDuration time.Duration
	// Nodes are the running node agents.
	Nodes []*Node
	// EnvoyPaths is the path mode the nodes run Envoy pods in: PathsMountNS or PathsRewrite
	// (PathsAuto when there are no nodes).
	EnvoyPaths PathMode

	binder   *Binder
	services *serviceRouter
	nodeLogs []*os.File
	lay      layout
	ca       *authority
	log      *slog.Logger
	ownDir   bool
	procs    []*process // in start order
	stopOnce sync.Once
	stopErr  error
}

// Component names, as used for process logs (LogTail).
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
)

const (
	adminUser   = "testbed-admin"
	stopGrace   = 10 * time.Second
	pollEvery   = 100 * time.Millisecond
	httpTimeout = 5 * time.Second
)

// Start starts etcd, kube-apiserver and kube-controller-manager and returns once the API server
// is ready and the controllers have created the default ServiceAccount (proof that the
// controller manager authenticates, is authorized and runs its loops). On error, everything
// started is stopped and the error carries the end of the failing component's log.
func Start(ctx context.Context, opts Options) (*Testbed, error) {
	begin := time.Now()
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if opts.ServiceClusterIPRange == "" {
		opts.ServiceClusterIPRange = "10.96.0.0/16"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	tb := &Testbed{BinDir: binDir, log: log, Dir: opts.Dir}
	if tb.Dir == "" {
		if tb.Dir, err = os.MkdirTemp("", "certdrift-testbed-"); err != nil {
			return nil, fmt.Errorf("create testbed directory: %w", err)
		}
		tb.ownDir = true
	} else if err := os.MkdirAll(tb.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create testbed directory %s: %w", tb.Dir, err)
	}
	if err := tb.start(ctx, opts); err != nil {
		if stopErr := tb.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, fmt.Errorf("start testbed in %s: %w", tb.Dir, err)
	}
	tb.StartDuration = time.Since(begin)
	log.Info("testbed ready", "dir", tb.Dir, "server", tb.Config.Host, "kubeconfig", tb.KubeconfigPath,
		"start_seconds", tb.StartDuration.Seconds())
	return tb, nil
}

func (tb *Testbed) start(ctx context.Context, opts Options) error {
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	tb.lay = layout{
		dir:                   tb.Dir,
		etcdClientPort:        ports[0],
		etcdPeerPort:          ports[1],
		apiserverPort:         ports[2],
		controllerManagerPort: ports[3],
		serviceClusterIPRange: opts.ServiceClusterIPRange,
		serviceAccountIssuer:  "https://kubernetes.default.svc.cluster.local",
	}
	if err := tb.writePKI(); err != nil {
		return err
	}

	step := time.Now()
	etcd, err := tb.run(Etcd, tb.lay.etcdArgs())
	if err != nil {
		return err
	}
	etcdHealth := &http.Client{Timeout: httpTimeout}
	if err := waitFor(ctx, etcd, "etcd health", func(ctx context.Context) error {
		return expectOK(ctx, etcdHealth, tb.lay.etcdURL()+"/health")
	}); err != nil {
		return err
	}
	tb.log.Info("etcd ready", "url", tb.lay.etcdURL(), "seconds", time.Since(step).Seconds())

	step = time.Now()
	apiserver, err := tb.run(APIServer, tb.lay.apiserverArgs())
	if err != nil {
		return err
	}
	adminHTTP, err := rest.HTTPClientFor(tb.Config)
	if err != nil {
		return fmt.Errorf("build admin HTTP client: %w", err)
	}
	adminHTTP.Timeout = httpTimeout
	if err := waitFor(ctx, apiserver, "kube-apiserver /readyz", func(ctx context.Context) error {
		return expectOK(ctx, adminHTTP, tb.Config.Host+"/readyz")
	}); err != nil {
		return err
	}
	tb.log.Info("kube-apiserver ready", "url", tb.Config.Host, "seconds", time.Since(step).Seconds())

	step = time.Now()
	kcm, err := tb.run(ControllerManager, tb.lay.controllerManagerArgs())
	if err != nil {
		return err
	}
	kcmHTTP, err := tb.mtlsClient(adminUser)
	if err != nil {
		return err
	}
	kcmURL := "https://127.0.0.1:" + strconv.Itoa(tb.lay.controllerManagerPort) + "/healthz"
	if err := waitFor(ctx, kcm, "kube-controller-manager /healthz", func(ctx context.Context) error {
		return expectOK(ctx, kcmHTTP, kcmURL)
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, kcm, "ServiceAccount default/default (created by the serviceaccount controller)", func(ctx context.Context) error {
		_, err := tb.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	tb.log.Info("kube-controller-manager ready", "seconds", time.Since(step).Seconds())
	return tb.startNodes(ctx, opts)
}

// writePKI mints the CA and every certificate and key the components and the admin use, and
// writes the admin and controller-manager kubeconfigs.
func (tb *Testbed) writePKI() error {
	ca, err := newAuthority()
	if err != nil {
		return err
	}
	tb.ca = ca
	names, err := tb.lay.servingNames()
	if err != nil {
		return err
	}
	dns, ips := splitHosts(names)
	files := map[string][]byte{"ca.crt": ca.certPEM}
	add := func(name string, kp keyPair, err error) error {
		if err != nil {
			return err
		}
		files[name+".crt"], files[name+".key"] = kp.certPEM, kp.keyPEM
		return nil
	}
	apiserverKP, err := ca.servingCert("kube-apiserver", dns, ips)
	if err := add("apiserver", apiserverKP, err); err != nil {
		return err
	}
	kubeletClient, err := ca.clientCert("kube-apiserver-kubelet-client", "system:masters")
	if err := add("apiserver-kubelet-client", kubeletClient, err); err != nil {
		return err
	}
	kcmServing, err := ca.servingCert("kube-controller-manager", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err := add("controller-manager", kcmServing, err); err != nil {
		return err
	}
	// A separate CA, so that no ordinary client certificate can assert request headers.
	frontProxyCA, err := newAuthority()
	if err != nil {
		return err
	}
	files["front-proxy-ca.crt"] = frontProxyCA.certPEM
	frontProxyClient, err := frontProxyCA.clientCert("front-proxy-client")
	if err := add("front-proxy-client", frontProxyClient, err); err != nil {
		return err
	}
	saKey, saPub, err := serviceAccountKey()
	if err != nil {
		return err
	}
	files["sa.key"], files["sa.pub"] = saKey, saPub
	if err := writeFiles(filepath.Join(tb.Dir, "pki"), files); err != nil {
		return err
	}

	admin, err := ca.clientCert(adminUser, "system:masters")
	if err != nil {
		return err
	}
	server := tb.lay.apiserverURL()
	tb.KubeconfigPath = filepath.Join(tb.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(tb.KubeconfigPath, server, ca.certPEM, adminUser, admin); err != nil {
		return err
	}
	// The bootstrap RBAC policy binds the system:kube-controller-manager role to this user.
	kcmClient, err := ca.clientCert("system:kube-controller-manager")
	if err != nil {
		return err
	}
	if err := writeKubeconfig(filepath.Join(tb.Dir, "controller-manager.kubeconfig"), server, ca.certPEM,
		"system:kube-controller-manager", kcmClient); err != nil {
		return err
	}
	tb.Config = restConfig(server, ca.certPEM, admin)
	if tb.Client, err = kubernetes.NewForConfig(tb.Config); err != nil {
		return fmt.Errorf("build admin client for %s: %w", server, err)
	}
	return nil
}

func splitHosts(hosts []string) (dns []string, ips []net.IP) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	return dns, ips
}

func (tb *Testbed) run(name string, args []string) (*process, error) {
	p, err := startProcess(name, filepath.Join(tb.BinDir, name), args, tb.lay.logDir())
	if err != nil {
		return nil, err
	}
	tb.procs = append(tb.procs, p)
	return p, nil
}

// mtlsClient is an HTTP client trusting the testbed CA and presenting a client certificate.
func (tb *Testbed) mtlsClient(user string, groups ...string) (*http.Client, error) {
	kp, err := tb.ca.clientCert(user, groups...)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(kp.certPEM, kp.keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load client certificate for %q: %w", user, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(tb.ca.cert)
	return &http.Client{
		Timeout: httpTimeout,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		}},
	}, nil
}

// waitFor polls check until it succeeds, the component exits, or ctx ends.
func waitFor(ctx context.Context, p *process, what string, check func(context.Context) error) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	var last error
	for {
		if err := p.exitErr(); err != nil {
			return p.failure("wait for "+what, err)
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return p.failure("wait for "+what, fmt.Errorf("%w (last error: %v)", ctx.Err(), last))
		case <-t.C:
		}
	}
}

// maxProbeBody bounds what is read from a health endpoint.
const maxProbeBody = 64 << 10

func expectOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("build request for %s: %w", url, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d: %.200s", url, resp.StatusCode, body)
	}
	return nil
}

// Stop stops the components in reverse start order and, if Start created Dir, removes it.
// It is idempotent.
func (tb *Testbed) Stop() error {
	tb.stopOnce.Do(func() {
		var errs []error
		tb.stopNodes()
		for i := len(tb.procs) - 1; i >= 0; i-- {
			if err := tb.procs[i].stop(stopGrace); err != nil {
				errs = append(errs, err)
			}
		}
		if tb.ownDir {
			if err := os.RemoveAll(tb.Dir); err != nil {
				errs = append(errs, fmt.Errorf("remove testbed directory %s: %w", tb.Dir, err))
			}
		}
		tb.stopErr = errors.Join(errs...)
	})
	return tb.stopErr
}

// LogTail returns the last n lines of a component's log (Etcd, APIServer, ControllerManager).
func (tb *Testbed) LogTail(component string, n int) string {
	return tailFile(filepath.Join(tb.lay.logDir(), component+".log"), n)
}

// DumpLogs writes the last n lines of every component's log to w; tests call it on failure.
func (tb *Testbed) DumpLogs(w io.Writer, n int) {
	for _, p := range tb.procs {
		fmt.Fprintf(w, "--- last %d lines of %s (%s) ---\n%s\n", n, p.name, p.logPath, p.tail(n))
	}
	tb.dumpNodeLogs(w, n)
}

// CAPEM returns the testbed CA certificate, which signs the API server's serving certificate
// and every client certificate the API server accepts.
func (tb *Testbed) CAPEM() []byte { return append([]byte(nil), tb.ca.certPEM...) }

// ClientConfig returns a client configuration authenticating as user with groups through a
// freshly minted client certificate; RBAC decides what it may do.
func (tb *Testbed) ClientConfig(user string, groups ...string) (*rest.Config, error) {
	kp, err := tb.ca.clientCert(user, groups...)
	if err != nil {
		return nil, err
	}
	return restConfig(tb.Config.Host, tb.ca.certPEM, kp), nil
}

// WriteKubeconfig writes a kubeconfig for user with groups to path (mode 0600).
func (tb *Testbed) WriteKubeconfig(path, user string, groups ...string) error {
	kp, err := tb.ca.clientCert(user, groups...)
	if err != nil {
		return err
	}
	return writeKubeconfig(path, tb.Config.Host, tb.ca.certPEM, user, kp)
}

// IssueServingCert returns a PEM certificate and key for a server at hosts (DNS names or IPs),
// signed by the testbed CA, which the API server trusts for kubelet endpoints.
func (tb *Testbed) IssueServingCert(cn string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	dns, ips := splitHosts(hosts)
	kp, err := tb.ca.servingCert(cn, dns, ips)
	if err != nil {
		return nil, nil, err
	}
	return kp.certPEM, kp.keyPEM, nil
}

// Kubectl runs the cached kubectl against the testbed as the admin and returns its combined
// output.
func (tb *Testbed) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(tb.BinDir, "kubectl"), append([]string{"--kubeconfig=" + tb.KubeconfigPath}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + tb.Dir}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %v: %w", args, err)
	}
	return out, nil
}
