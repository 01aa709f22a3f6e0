package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// EnvoyGatewayVersion is the Envoy Gateway release scripts/build-envoy-gateway.sh builds.
const EnvoyGatewayVersion = "v1.9.1"

// EnvoyGatewayDirEnv overrides where the envoy-gateway binary and crds.yaml are found.
const EnvoyGatewayDirEnv = "CERTDRIFT_ENVOY_GATEWAY_DIR"

// envoyGatewayHint says how to get the binary; every "missing" error carries it.
const envoyGatewayHint = "build it once with `make envoy-gateway` (scripts/build-envoy-gateway.sh; " +
	"later runs reuse .cache/envoy-gateway), or point " + EnvoyGatewayDirEnv +
	" at a directory holding envoy-gateway and crds.yaml"

// EnvoyGatewayNamespace is where the control plane runs and certgen writes its Secrets: the
// default of the real control plane (ENVOY_GATEWAY_NAMESPACE unset).
const EnvoyGatewayNamespace = "envoy-gateway-system"

// EnvoyGatewayControllerName is the GatewayClass controllerName the control plane reconciles.
const EnvoyGatewayControllerName = "gateway.envoyproxy.io/gatewayclass-controller"

// findEnvoyGatewayDir returns the directory holding the envoy-gateway binary and crds.yaml.
func findEnvoyGatewayDir(explicit string) (string, error) {
	dir := explicit
	if dir == "" {
		dir = os.Getenv(EnvoyGatewayDirEnv)
	}
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("locate envoy-gateway: %w; %s", err, envoyGatewayHint)
		}
		dir = filepath.Join(root, ".cache", "envoy-gateway", EnvoyGatewayVersion)
	}
	for _, name := range []string{"envoy-gateway", "crds.yaml"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("envoy-gateway %s: %w; %s", EnvoyGatewayVersion, err, envoyGatewayHint)
		}
		if name == "envoy-gateway" && fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable; %s", filepath.Join(dir, name), envoyGatewayHint)
		}
	}
	return dir, nil
}

// EnvoyGatewayOptions configure StartEnvoyGateway. The zero value is ready to use.
type EnvoyGatewayOptions struct {
	// Dir holds envoy-gateway and crds.yaml. Default: $CERTDRIFT_ENVOY_GATEWAY_DIR, else
	// .cache/envoy-gateway/<EnvoyGatewayVersion>/ at the repository root.
	Dir string
	// ReadyTimeout bounds CRD installation, certgen and the control plane becoming ready
	// (default 2 minutes).
	ReadyTimeout time.Duration
	// RateLimitRedisURL turns global rate limiting on, as the chart's
	// config.envoyGateway.rateLimit does: the EnvoyGateway config gets
	// rateLimit.backend.redis.url, and the control plane creates the envoy-ratelimit
	// Deployment (the real rate limit service on the node agent, containers_ratelimit.go)
	// and serves its configuration over xDS on 18001. Typically a Redis's Service address
	// (StartRedis).
	RateLimitRedisURL string
}

// EnvoyGateway is the real Envoy Gateway control plane (`envoy-gateway server`, Kubernetes
// provider) running against the testbed as a child process of the test.
type EnvoyGateway struct {
	// Dir holds the control plane's config file, its /certs source and its log.
	Dir string
	// LogPath is the control plane's stdout and stderr.
	LogPath string
	// Version is the first line of `envoy-gateway version`.
	Version string

	proc     *process
	certs    *hostSecretVolume
	netns    *netNS
	unroute  func()
	stopOnce sync.Once
	stopErr  error
}

// InstallEnvoyGatewayCRDs applies the Gateway API and Envoy Gateway CRDs rendered from the
// gateway module's charts/gateway-crds-helm (crds.yaml in dir, see scripts/build-envoy-gateway.sh)
// and waits until every one is Established. Server-side apply: several CRDs are larger than the
// 256 KiB last-applied annotation a client-side apply would write.
func (tb *Testbed) InstallEnvoyGatewayCRDs(ctx context.Context, dir string) error {
	dir, err := findEnvoyGatewayDir(dir)
	if err != nil {
		return err
	}
	crds := filepath.Join(dir, "crds.yaml")
	if out, err := tb.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", crds); err != nil {
		return fmt.Errorf("install CRDs from %s: %w\n%s", crds, err, indent(lastLines(string(out), 10)))
	}
	// Not `-f crds.yaml`: the file also holds the Gateway API's safe-upgrades
	// ValidatingAdmissionPolicy and its binding, which have no Established condition.
	if out, err := tb.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"); err != nil {
		return fmt.Errorf("wait for the CRDs of %s: %w\n%s", crds, err, indent(lastLines(string(out), 10)))
	}
	return nil
}

// StartEnvoyGateway installs the CRDs, runs `envoy-gateway certgen` (which writes the Secrets
// envoy-gateway, envoy, envoy-rate-limit and envoy-oidc-hmac into EnvoyGatewayNamespace), then
// starts `envoy-gateway server` with a config file for the Kubernetes provider and waits until its
// controller-runtime manager reports ready (cache synced).
//
// What differs from the chart's Deployment, and why:
//   - The server reads its xDS serving certificate from the fixed path /certs (the chart mounts
//     the Secret envoy-gateway there). It runs in a private mount namespace with a directory
//     bind-mounted read-only at /certs, the same mechanism as certdrift pods
//     (mountns_linux.go); this needs root. The testbed keeps that directory as the kubelet keeps
//     a Secret volume (hostvolume.go: the atomic-writer layout, re-projected every volume sync
//     period), so `certgen --overwrite` reaches the running server as in a cluster. The server
//     reads the files again for every TLS handshake it accepts (internal/crypto LoadTLSConfig's
//     GetConfigForClient): a new connection sees the new files, an established one keeps the
//     certificates it was made with.
//   - It binds fixed ports on all addresses (xDS 18000, metrics 19001, health 8081) and admin
//     127.0.0.1:19000, as it does in its pod's network namespace; it gets a network namespace
//     of its own here too (netns_linux.go), so two control planes, or a pod listening on 18000,
//     never collide. The testbed relays the API server's 127.0.0.1:<port> into it and reaches
//     its ports with Dial.
//   - It authenticates with the testbed's admin kubeconfig (KUBECONFIG), not the chart's
//     ServiceAccount and RBAC, and certgen runs the same way (the chart runs it as a Job).
//   - The topology injector (a mutating webhook on pods) is disabled: the testbed has no
//     network path from the API server to a webhook, and certgen is told not to patch its
//     MutatingWebhookConfiguration.
//
// Leader election is on (the default): the control plane takes the Lease
// 5b9825d2.gateway.envoyproxy.io in EnvoyGatewayNamespace against the real API server.
func (tb *Testbed) StartEnvoyGateway(ctx context.Context, opts EnvoyGatewayOptions) (*EnvoyGateway, error) {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	binDir, err := findEnvoyGatewayDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(binDir, "envoy-gateway")
	eg := &EnvoyGateway{Dir: filepath.Join(tb.Dir, "envoy-gateway")}
	if err := os.MkdirAll(eg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", eg.Dir, err)
	}
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	eg.Version, _, _ = strings.Cut(string(out), "\n")
	if err != nil || eg.Version != "ENVOY_GATEWAY_VERSION: "+EnvoyGatewayVersion {
		return nil, fmt.Errorf("%s version: %q (%v), want %s; %s", bin, lastLines(string(out), 3), err, EnvoyGatewayVersion, envoyGatewayHint)
	}

	if err := tb.InstallEnvoyGatewayCRDs(ctx, binDir); err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: EnvoyGatewayNamespace}}
	if _, err := tb.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", EnvoyGatewayNamespace, err)
	}
	if err := tb.EnvoyGatewayCertgen(ctx, binDir); err != nil {
		return nil, err
	}

	certs := filepath.Join(eg.Dir, "certs")
	every := 2 * time.Second
	if len(tb.Nodes) > 0 {
		every = tb.Nodes[0].syncDelay
	}
	// The chart mounts the whole Secret envoy-gateway at /certs; the server reads ca.crt,
	// tls.crt and tls.key from it.
	if eg.certs, err = startHostSecretVolume(ctx, tb.Client, EnvoyGatewayNamespace, "envoy-gateway", certs, nil, every, tb.log); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(eg.Dir, "envoy-gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(envoyGatewayConfig(opts)), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", cfgPath, err)
	}
	// Before the server starts: when rate limiting is on it creates the rate limit's
	// Deployment, Service and ServiceAccount once, at start, owned by the chart's objects of the
	// same kinds named envoy-gateway, and gives up (logging "failed to create ratelimit infra")
	// if one is missing.
	if err := tb.createEnvoyGatewayObjects(ctx); err != nil {
		eg.certs.Stop()
		return nil, err
	}
	if eg.netns, err = newNetNS(); err != nil {
		eg.certs.Stop()
		return nil, fmt.Errorf("envoy-gateway: %w", err)
	}
	// The kubeconfig names the API server as 127.0.0.1:<port>: the same address inside.
	apiserver := strings.TrimPrefix(tb.Config.Host, "https://")
	if err := eg.netns.forwardIn(apiserver, apiserver); err != nil {
		eg.certs.Stop()
		eg.netns.Close()
		return nil, fmt.Errorf("envoy-gateway: relay the API server: %w", err)
	}
	if eg.proc, err = startEnvoyGatewayServer(bin, cfgPath, certs, eg.Dir, tb.KubeconfigPath, eg.netns); err != nil {
		eg.certs.Stop()
		eg.netns.Close()
		return nil, err
	}
	eg.LogPath = eg.proc.logPath
	if err := eg.waitReady(ctx); err != nil {
		eg.Stop()
		return nil, err
	}
	tb.RouteServiceToHost(EnvoyGatewayNamespace, "envoy-gateway", eg.Dial)
	eg.unroute = func() { tb.RouteServiceToHost(EnvoyGatewayNamespace, "envoy-gateway", nil) }
	return eg, nil
}

// createEnvoyGatewayObjects creates what the chart gives the control plane: the Service, whose
// cluster DNS name the proxies' bootstrap names for xDS (the testbed routes it to the host
// process, services.go, since no pod backs it), the ServiceAccount, and the Deployment with
// replicas 0 (the process runs on the host: the object exists because the control plane makes
// it the owner of the rate limit's Deployment).
func (tb *Testbed) createEnvoyGatewayObjects(ctx context.Context) error {
	labels := map[string]string{"control-plane": "envoy-gateway"}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "envoy-gateway", Namespace: EnvoyGatewayNamespace, Labels: labels}}
	if _, err := tb.Client.CoreV1().ServiceAccounts(EnvoyGatewayNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/envoy-gateway: %w", EnvoyGatewayNamespace, err)
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "envoy-gateway", Namespace: EnvoyGatewayNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: "envoy-gateway", Containers: []corev1.Container{{
					Name: "envoy-gateway", Image: "docker.io/envoyproxy/gateway:" + EnvoyGatewayVersion,
					Args: []string{"server", "--config-path=/config/envoy-gateway.yaml"},
				}}},
			},
		},
	}
	if _, err := tb.Client.AppsV1().Deployments(EnvoyGatewayNamespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Deployment %s/envoy-gateway: %w", EnvoyGatewayNamespace, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "envoy-gateway", Namespace: EnvoyGatewayNamespace,
			Labels: map[string]string{"control-plane": "envoy-gateway"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"control-plane": "envoy-gateway"},
			Ports: []corev1.ServicePort{
				{Name: "grpc", Port: 18000, TargetPort: intstr.FromInt32(18000)},
				{Name: "ratelimit", Port: 18001, TargetPort: intstr.FromInt32(18001)},
				{Name: "wasm", Port: 18002, TargetPort: intstr.FromInt32(18002)},
				{Name: "metrics", Port: 19001, TargetPort: intstr.FromInt32(19001)},
			},
		},
	}
	if _, err := tb.Client.CoreV1().Services(EnvoyGatewayNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Service %s/envoy-gateway: %w", EnvoyGatewayNamespace, err)
	}
	return nil
}

// envoyGatewayConfig is the server's EnvoyGateway config file: the chart's defaults (Kubernetes
// provider, its controllerName, the shutdown-manager image of the release: a binary built
// without the release Makefile's -X defaults names docker.io/envoyproxy/gateway-dev:latest)
// minus the topology injector webhook, plus the rate limit backend when asked for.
func envoyGatewayConfig(opts EnvoyGatewayOptions) string {
	cfg := `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyGateway
gateway:
  controllerName: ` + EnvoyGatewayControllerName + `
logging:
  level:
    default: info
provider:
  type: Kubernetes
  kubernetes:
    proxyTopologyInjector:
      disabled: true
    shutdownManager:
      image: docker.io/envoyproxy/gateway:` + EnvoyGatewayVersion + `
`
	if opts.RateLimitRedisURL != "" {
		cfg += `rateLimit:
  backend:
    type: Redis
    redis:
      url: ` + strconv.Quote(opts.RateLimitRedisURL) + `
`
	}
	return cfg
}

// EnvoyGatewayCertgen runs `envoy-gateway certgen` against the testbed: it creates the control
// plane's Secrets in EnvoyGatewayNamespace if absent (the namespace must exist). Its output
// names the Secrets it made, never their contents.
func (tb *Testbed) EnvoyGatewayCertgen(ctx context.Context, dir string, args ...string) error {
	dir, err := findEnvoyGatewayDir(dir)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "envoy-gateway"), append([]string{"certgen", "--disable-topology-injector"}, args...)...)
	cmd.Env = tb.envoyGatewayEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("envoy-gateway certgen %v: %w\n%s", args, err, indent(lastLines(string(out), 10)))
	}
	return nil
}

func (tb *Testbed) envoyGatewayEnv() []string {
	return envoyGatewayEnv(tb.Dir, tb.KubeconfigPath)
}

// envoyGatewayEnv is all the environment the control plane gets: nothing from a developer's
// shell (a KUBECONFIG there would point it at a real cluster).
func envoyGatewayEnv(home, kubeconfig string) []string {
	return []string{"PATH=/usr/bin:/bin", "HOME=" + home, "KUBECONFIG=" + kubeconfig,
		"ENVOY_GATEWAY_NAMESPACE=" + EnvoyGatewayNamespace}
}

func startEnvoyGatewayServer(bin, cfgPath, certs, dir, kubeconfig string, ns *netNS) (*process, error) {
	logPath := filepath.Join(dir, "envoy-gateway.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open envoy-gateway log %s: %w", logPath, err)
	}
	cmd := exec.Command(bin, "server", "--config-path", cfgPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = envoyGatewayEnv(dir, kubeconfig)
	cmd.Dir = dir
	cmd.SysProcAttr = childAttrs()
	exited, err := startInNamespaces(cmd, []bindMount{{source: certs, target: "/certs", readOnly: true}}, ns)
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start envoy-gateway server: %w", err)
	}
	p := &process{name: "envoy-gateway", logPath: logPath, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.waitErr = <-exited
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// waitReady waits for the manager's readiness endpoint (cache synced) on :8081, which the
// chart's readinessProbe polls.
func (eg *EnvoyGateway) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: httpTimeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return eg.Dial(ctx, 8081)
		},
	}}
	defer client.CloseIdleConnections()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	var last error
	for {
		if err := eg.proc.exitErr(); err != nil {
			return eg.proc.failure("envoy-gateway server", err)
		}
		resp, err := client.Get("http://envoy-gateway/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /readyz: status %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return eg.proc.failure("envoy-gateway server not ready", fmt.Errorf("%w (last: %v)", ctx.Err(), last))
		case <-t.C:
		}
	}
}

// Dial connects to port on the control plane, inside its network namespace.
func (eg *EnvoyGateway) Dial(ctx context.Context, port int) (net.Conn, error) {
	return eg.netns.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// LogTail returns the last n lines of the control plane's log.
func (eg *EnvoyGateway) LogTail(n int) string { return eg.proc.tail(n) }

// Exited returns a non-nil error once the control plane has exited.
func (eg *EnvoyGateway) Exited() error { return eg.proc.exitErr() }

// Stop terminates the control plane (SIGTERM, SIGKILL after the grace period) and its network
// namespace. The Envoy proxy Deployments it created stay: they belong to the cluster.
// A second Stop returns the first one's result.
func (eg *EnvoyGateway) Stop() error {
	eg.stopOnce.Do(func() {
		if eg.unroute != nil {
			eg.unroute()
		}
		err := eg.proc.stop(stopGrace)
		eg.certs.Stop()
		eg.stopErr = errors.Join(err, eg.netns.Close())
	})
	return eg.stopErr
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CertsDir is the node-side directory bind-mounted at /certs in the control plane's mount
// namespace (the Secret envoy-gateway, kept current like a Secret volume).
func (eg *EnvoyGateway) CertsDir() string { return eg.certs.to }

// HoldCerts stops re-projecting /certs: the control plane keeps seeing the Secret as it is now,
// as a control plane whose node's kubelet has not synced the volume yet. ReleaseCerts projects
// the current Secret at once and resumes the sync.
func (eg *EnvoyGateway) HoldCerts() { eg.certs.Hold() }

// ReleaseCerts: see HoldCerts.
func (eg *EnvoyGateway) ReleaseCerts(ctx context.Context) error { return eg.certs.Release(ctx) }
