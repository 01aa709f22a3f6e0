package testbed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/certdrift/certdrift/test/envoytest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// A container whose image names Envoy runs as a real Envoy process (see containers_envoy.go for
// how it sees its volumes and addresses); one whose image is certdrift's runs the certdrift
// binary the testbed was given, with the pod's own ServiceAccount token (containers_certdrift.go).
// Any other image runs nothing and is reported Running and Ready, so that pods with helper
// containers still become Ready; its probes are ignored.
//
// A container that exits is restarted according to the pod's restartPolicy after a back-off of
// 1s doubling to 10s (the kubelet's is 10s doubling to 5 minutes: tests need to be quicker),
// with restartCount and lastState.terminated kept as the kubelet keeps them.

const (
	backoffStart = time.Second
	backoffMax   = 10 * time.Second
	probeTimeout = time.Second
	// probeEvery caps periodSeconds: tests should not wait 10s for a readiness flip.
	probeEvery = time.Second
)

type containerState int

const (
	stateWaiting containerState = iota
	stateRunning
	stateTerminated
)

type container struct {
	w      *podWorker
	spec   corev1.Container
	init   bool // a native sidecar: reported among initContainerStatuses
	policy corev1.RestartPolicy
	envoy  bool
	// certdrift: the image is certdrift's (containers_certdrift.go).
	certdrift bool
	// ratelimit: the image is the Envoy rate limit service's (containers_ratelimit.go).
	ratelimit bool
	dir       string
	env       map[string]string
	volumes   map[string]corev1.Volume // the pod's, by name
	log       *slog.Logger

	stopCh   chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	grace    time.Duration // set before stopCh is closed

	mu            sync.Mutex
	state         containerState
	waitReason    string
	waitMessage   string
	startedAt     time.Time
	terminated    *corev1.ContainerStateTerminated
	lastTerm      *corev1.ContainerStateTerminated
	restarts      int32
	ready         bool
	containerID   string
	version       string
	adminAddr     string // host:port of the Envoy admin, once known
	lastProbe     time.Time
	probeOK       int32
	probeFail     int32
	renderSources map[string]renderedSource // path_config_source as configured → its copy
}

func newContainer(w *podWorker, pod *corev1.Pod, spec corev1.Container, init bool) *container {
	c := &container{
		w: w, spec: spec, init: init, policy: pod.Spec.RestartPolicy,
		envoy: isEnvoyImage(spec.Image), certdrift: isCertdriftImage(spec.Image), ratelimit: isRatelimitImage(spec.Image),
		dir:    filepath.Join(w.dir, "containers", spec.Name),
		log:    w.log.With("container", spec.Name),
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
		state:  stateWaiting, waitReason: "ContainerCreating",
	}
	if init {
		c.policy = corev1.RestartPolicyAlways
	}
	c.env = containerEnv(pod, w, spec)
	c.volumes = map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		c.volumes[v.Name] = v
	}
	return c
}

// podNet is what rewriting needs to know of the container's pod and node.
func (c *container) podNet() podNet {
	return podNet{podIP: c.w.podIP, localIP: c.w.localIP, resolve: c.w.node.resolveService}
}

// isEnvoyImage looks at the image's repository name, not its registry or owner, so that
// envoyproxy/gateway and envoyproxy/ratelimit (not Envoy) are told apart from envoyproxy/envoy,
// envoyproxy/envoy-distroless and Istio's proxyv2.
func isEnvoyImage(image string) bool {
	name := strings.ToLower(image)
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	name = name[strings.LastIndex(name, "/")+1:]
	if i := strings.Index(name, ":"); i >= 0 {
		name = name[:i]
	}
	return strings.Contains(name, "envoy") || name == "proxyv2"
}

var tagVersionRE = regexp.MustCompile(`v?([0-9]+\.[0-9]+\.[0-9]+)`)

// envoyBinary picks the Envoy for an image: the version in its tag when that version is cached
// (envoyproxy/envoy:v1.36.2), else the harness default.
func envoyBinary(image string) (envoytest.Binary, error) {
	if i := strings.LastIndex(image, ":"); i >= 0 && !strings.Contains(image[i:], "/") {
		if m := tagVersionRE.FindStringSubmatch(image[i+1:]); m != nil {
			if b, err := envoytest.CachedBinary(m[1]); err == nil {
				return b, nil
			}
		}
	}
	return envoytest.LocateBinary()
}

// containerEnv resolves env entries with a literal value or a pod fieldRef; other sources
// (Secret/ConfigMap keys, resources) are left out. HOSTNAME is the pod name, as in a pod.
func containerEnv(pod *corev1.Pod, w *podWorker, spec corev1.Container) map[string]string {
	env := map[string]string{"HOSTNAME": pod.Name}
	for _, e := range spec.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expandVars(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			if v, ok := podField(pod, w, e.ValueFrom.FieldRef.FieldPath); ok {
				env[e.Name] = v
			}
		}
	}
	return env
}

// runsProcess: the image is one the testbed runs a real process for.
func (c *container) runsProcess() bool { return c.envoy || c.certdrift || c.ratelimit }

func (c *container) start() { go c.supervise() }

// stop terminates the container: SIGTERM, SIGKILL after grace. It waits for the supervisor.
func (c *container) stop(grace time.Duration) {
	c.stopOnce.Do(func() {
		c.grace = grace
		close(c.stopCh)
	})
	<-c.done
}

func (c *container) stopping() bool {
	select {
	case <-c.stopCh:
		return true
	default:
		return false
	}
}

func (c *container) supervise() {
	defer close(c.done)
	backoff := backoffStart
	for attempt := 0; ; attempt++ {
		exitCode, reason, message, err := c.runOnce(attempt)
		if c.stopping() {
			return
		}
		if err != nil {
			// Could not even start (bad arguments, unreadable config): the kubelet reports
			// CreateContainerConfigError and retries without counting a restart.
			c.setWaiting("CreateContainerConfigError", err.Error())
			c.log.Warn("cannot start container", "err", err)
			attempt--
		} else {
			c.log.Info("container exited", "exit_code", exitCode, "reason", reason)
			if !c.shouldRestart(exitCode) {
				return
			}
			c.mu.Lock()
			c.state, c.waitReason = stateWaiting, "CrashLoopBackOff"
			c.waitMessage = fmt.Sprintf("back-off %s restarting failed container %s (%s)", backoff, c.spec.Name, message)
			c.mu.Unlock()
		}
		select {
		case <-c.stopCh:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
	}
}

func (c *container) shouldRestart(exitCode int32) bool {
	switch c.policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

func (c *container) setWaiting(reason, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state, c.waitReason, c.waitMessage = stateWaiting, reason, msg
}

// runOnce runs one instance of the container until it exits or is stopped. err is set when it
// could not be started at all.
func (c *container) runOnce(attempt int) (exitCode int32, reason, message string, err error) {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return 0, "", "", fmt.Errorf("create container directory: %w", err)
	}
	if !c.runsProcess() {
		c.markRunning(attempt, "testbed://"+string(c.w.uid)+"/"+c.spec.Name, "")
		<-c.stopCh
		c.markTerminated(0, "Completed", "")
		return 0, "Completed", "", nil
	}
	var (
		path, version string
		argv          []string
		env           = c.env
		binds         []bindMount
	)
	if c.envoy {
		bin, err := envoyBinary(c.spec.Image)
		if err != nil {
			return 0, "", "", err
		}
		path, version = bin.Path, bin.Version
		if argv, binds, err = c.prepareEnvoy(path); err != nil {
			return 0, "", "", err
		}
	} else if c.ratelimit {
		if path, argv, env, binds, err = c.prepareRatelimit(); err != nil {
			return 0, "", "", err
		}
	} else {
		if path, argv, env, err = c.prepareCertdrift(); err != nil {
			return 0, "", "", err
		}
		sa, err := c.serviceAccountBind()
		if err != nil {
			return 0, "", "", err
		}
		if sa != "" {
			binds = append(binds, bindMount{source: sa, target: serviceAccountDir, readOnly: true})
		}
	}
	console, err := os.OpenFile(filepath.Join(c.dir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, "", "", fmt.Errorf("open console log: %w", err)
	}
	defer console.Close()
	cmd := exec.Command(path, argv...)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = console, console
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = childAttrs()
	var exited <-chan error
	if len(binds) > 0 {
		if exited, err = startInMountNamespace(cmd, binds); err != nil {
			return 0, "", "", fmt.Errorf("start %s: %w", path, err)
		}
	} else {
		if err := startChild(cmd); err != nil {
			return 0, "", "", fmt.Errorf("start %s: %w", path, err)
		}
		ch := make(chan error, 1)
		go func() { ch <- cmd.Wait() }()
		exited = ch
	}
	c.version = version
	// The pid file lets ReadContainerFile look through the process's own mount namespace.
	_ = os.WriteFile(filepath.Join(c.dir, "pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	c.markRunning(attempt, fmt.Sprintf("testbed://%d", cmd.Process.Pid), version)
	c.log.Info("container process started", "pid", cmd.Process.Pid, "binary", filepath.Base(path), "version", version)
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-c.stopCh:
		waitErr = terminate(cmd, exited, c.grace)
	}
	exitCode, reason = exitStatus(waitErr)
	c.markTerminated(exitCode, reason, "")
	return exitCode, reason, fmt.Sprintf("exit code %d", exitCode), nil
}

// terminate sends SIGTERM to the process group, then SIGKILL after grace.
func terminate(cmd *exec.Cmd, exited <-chan error, grace time.Duration) error {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-exited:
		return err
	case <-time.After(grace):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return <-exited
}

func exitStatus(err error) (int32, string) {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, "Completed"
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int32(ws.Signal()), "Error"
		}
		return int32(ee.ExitCode()), "Error"
	default:
		return 1, "Error"
	}
}

func (c *container) markRunning(attempt int, id, version string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if attempt > 0 {
		c.restarts++
		c.lastTerm = c.terminated
	}
	c.state, c.startedAt, c.terminated = stateRunning, time.Now(), nil
	c.containerID, c.version = id, version
	c.ready, c.probeOK, c.probeFail, c.lastProbe = false, 0, 0, time.Time{}
	c.waitReason, c.waitMessage = "", ""
	if !c.runsProcess() {
		c.ready = true
	}
}

func (c *container) markTerminated(code int32, reason, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state, c.ready = stateTerminated, false
	c.terminated = &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: msg,
		StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.Now(), ContainerID: c.containerID,
	}
}

// prepareEnvoy prepares an Envoy start in the node's path mode and returns Envoy's arguments
// and, in PathsMountNS, the binds of its mount namespace. In PathsRewrite it materialises
// subPath mounts as copies and rewrites mount paths to node paths; in PathsMountNS paths stay
// as the container sees them and only addresses (and Service names) are rewritten. Either way
// the bootstrap is rendered into the container directory, and the files it names through
// path_config_source get rendered copies when they need rewriting.
func (c *container) prepareEnvoy(binary string) ([]string, []bindMount, error) {
	mountNS := c.w.node.pathMode == PathsMountNS
	var (
		mounts mountTable // container path → node path: where the agent reads what Envoy names
		paths  mountTable // the rewriting applied to what Envoy is given: none in a mount namespace
		binds  []bindMount
		err    error
	)
	if mountNS {
		if binds, err = c.binds(binary); err != nil {
			return nil, nil, err
		}
		for _, b := range binds {
			mounts = append(mounts, mount{path: b.target, host: b.source})
		}
		mounts = newMountTable(mounts)
	} else {
		if mounts, err = c.mounts(); err != nil {
			return nil, nil, err
		}
		paths = mounts
	}
	argv, err := envoyArgs(c.spec.Command, c.spec.Args)
	if err != nil {
		return nil, nil, err
	}
	for i := range argv {
		argv[i] = expandVars(argv[i], c.env)
	}
	parsed, err := parseEnvoyArgs(argv, paths)
	if err != nil {
		return nil, nil, err
	}
	net := c.podNet()
	var out []string
	var sources []string
	if parsed.configPath != "" {
		read := parsed.configPath // in PathsRewrite already the node path
		if mountNS {
			read, _ = mounts.rewrite(read)
		}
		rendered, srcs, err := c.renderFile(read, "bootstrap", paths, net)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, "-c", rendered)
		sources = append(sources, srcs...)
	}
	if parsed.configYAML != "" {
		js, srcs, err := renderConfig([]byte(parsed.configYAML), paths, net)
		if err != nil {
			return nil, nil, fmt.Errorf("--config-yaml: %w", err)
		}
		out = append(out, "--config-yaml", string(js))
		sources = append(sources, srcs...)
	}
	// Second level: files named by path_config_source get rewritten copies, and the rendered
	// bootstrap points at those copies. In a mount namespace a file that needs no rewriting (an
	// SDS file names only container paths) is left for Envoy to read where the config says, so
	// that its path and its watch are exactly a cluster's.
	c.mu.Lock()
	c.renderSources = map[string]renderedSource{}
	c.mu.Unlock()
	for i, src := range sources {
		if _, ok := c.renderSources[src]; ok {
			continue
		}
		read := src
		if mountNS {
			read, _ = mounts.rewrite(src)
		}
		if !c.underVolumes(read) {
			continue // a file outside the pod's volumes: Envoy reads it as is
		}
		if mountNS {
			same, err := rendersUnchanged(read, net)
			if err != nil {
				return nil, nil, err
			}
			if same {
				continue
			}
		}
		dst := filepath.Join(c.dir, "rendered", fmt.Sprintf("source-%d%s", i, filepath.Ext(src)))
		if err := c.renderSource(read, dst, paths, net); err != nil {
			return nil, nil, err
		}
		c.mu.Lock()
		c.renderSources[src] = renderedSource{read: read, dst: dst}
		c.mu.Unlock()
	}
	if len(c.renderSources) > 0 && parsed.configPath != "" {
		if err := c.pointAtRenderedSources(out[1]); err != nil {
			return nil, nil, err
		}
	}
	// An inline bootstrap names the sources too (Envoy Gateway's proxies get theirs this way,
	// with SDS files under /sds that name /certs): point it at the rendered copies as well.
	if i := slices.Index(out, "--config-yaml"); i >= 0 && len(c.renderSources) > 0 {
		js, err := c.atRenderedSources([]byte(out[i+1]))
		if err != nil {
			return nil, nil, fmt.Errorf("--config-yaml: %w", err)
		}
		out[i+1] = string(js)
	}
	c.mu.Lock()
	c.adminAddr = ""
	c.mu.Unlock()
	adminPath := filepath.Join(c.dir, "admin-address")
	_ = os.Remove(adminPath)
	out = append(out, parsed.rest...)
	out = append(out,
		"--disable-hot-restart", // no shared memory, so any number of Envoys run side by side
		"--concurrency", "1",    // two shared cores: one worker per Envoy
		"--log-path", filepath.Join(c.dir, "envoy.log"),
		"--file-flush-interval-msec", "100",
		"--admin-address-path", adminPath,
	)
	return out, binds, nil
}

// renderedSource is a path_config_source file as the agent reads it on the node and the
// rendered copy Envoy is pointed at.
type renderedSource struct{ read, dst string }

func (c *container) underVolumes(p string) bool {
	rel, err := filepath.Rel(c.w.dir, p)
	return err == nil && !strings.HasPrefix(rel, "..")
}

// renderFile reads a config file on the node and writes its rewritten JSON into the container's
// rendered directory. .pb and .pb_text bootstraps are passed through unrewritten.
func (c *container) renderFile(path, name string, mounts mountTable, net podNet) (string, []string, error) {
	ext := filepath.Ext(path)
	if ext == ".pb" || ext == ".pb_text" {
		c.log.Warn("binary/text proto config is not rewritten", "path", path)
		return path, nil, nil
	}
	data, err := readLimited(path)
	if err != nil {
		return "", nil, fmt.Errorf("read Envoy config: %w", err)
	}
	js, sources, err := renderConfig(data, mounts, net)
	if err != nil {
		return "", nil, fmt.Errorf("render Envoy config %s: %w", path, err)
	}
	dst := filepath.Join(c.dir, "rendered", name+".json")
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", nil, err
	}
	// 0600: a config may hold inline private keys.
	if err := os.WriteFile(dst, js, 0o600); err != nil {
		return "", nil, fmt.Errorf("write rendered config %s: %w", dst, err)
	}
	return dst, sources, nil
}

// renderSource writes the rewritten copy of a path_config_source file in place (see the
// package comment in containers_envoy.go on why not by rename).
func (c *container) renderSource(src, dst string, mounts mountTable, net podNet) error {
	data, err := readLimited(src)
	if err != nil {
		return fmt.Errorf("read config source: %w", err)
	}
	js, _, err := renderConfig(data, mounts, net)
	if err != nil {
		return fmt.Errorf("config source %s: %w", src, err)
	}
	if old, err := os.ReadFile(dst); err == nil && string(old) == string(js) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	return os.WriteFile(dst, js, 0o600)
}

// pointAtRenderedSources replaces, in the rendered bootstrap, each path_config_source path by
// its rendered copy.
func (c *container) pointAtRenderedSources(bootstrap string) error {
	data, err := os.ReadFile(bootstrap)
	if err != nil {
		return err
	}
	js, err := c.atRenderedSources(data)
	if err != nil {
		return err
	}
	return os.WriteFile(bootstrap, js, 0o600)
}

// atRenderedSources returns a rendered config with each path_config_source path replaced by its
// rendered copy.
func (c *container) atRenderedSources(data []byte) ([]byte, error) {
	var copies mountTable
	c.mu.Lock()
	for src, r := range c.renderSources {
		copies = append(copies, mount{path: src, host: r.dst})
	}
	c.mu.Unlock()
	js, _, err := renderConfig(data, newMountTable(copies), c.podNet())
	return js, err
}

// volumesSynced refreshes the rendered path_config_source copies after a volume sync.
func (c *container) volumesSynced() {
	c.mu.Lock()
	sources := maps.Clone(c.renderSources)
	c.mu.Unlock()
	if len(sources) == 0 {
		return
	}
	var paths mountTable
	if c.w.node.pathMode != PathsMountNS {
		var err error
		if paths, err = c.volumeMounts(); err != nil {
			return
		}
	}
	for src, r := range sources {
		if err := c.renderSource(r.read, r.dst, paths, c.podNet()); err != nil {
			c.log.Warn("refresh rendered config source", "path", src, "err", err)
		}
	}
}

// mounts copies subPath mounts (at every container start, as the kubelet binds them anew) and
// returns the container's mount table.
func (c *container) mounts() (mountTable, error) {
	var ms []mount
	for i, vm := range c.spec.VolumeMounts {
		host := c.w.volumeDir(vm.Name)
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			sub = expandVars(vm.SubPathExpr, c.env)
		}
		if sub != "" {
			dst := filepath.Join(c.dir, "subpaths", strconv.Itoa(i))
			if err := copySubPath(host, sub, dst); err != nil {
				return nil, fmt.Errorf("volumeMount %s (volume %q): %w", vm.MountPath, vm.Name, err)
			}
			host = dst
		}
		ms = append(ms, mount{path: vm.MountPath, host: host})
	}
	return newMountTable(ms), nil
}

// volumeMounts is mounts without copying subPaths again: the table for refreshing.
func (c *container) volumeMounts() (mountTable, error) {
	var ms []mount
	for i, vm := range c.spec.VolumeMounts {
		host := c.w.volumeDir(vm.Name)
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			host = filepath.Join(c.dir, "subpaths", strconv.Itoa(i))
		}
		ms = append(ms, mount{path: vm.MountPath, host: host})
	}
	return newMountTable(ms), nil
}

// adminGrace is how long a started Envoy may take to write its admin address before a
// bootstrap without admin is assumed and "running" counts as ready.
const adminGrace = 10 * time.Second

// probe runs the readiness check when due: the readinessProbe if it is httpGet or tcpSocket
// (against the pod IP, as the kubelet probes), else Envoy's admin /ready, else "running".
func (c *container) probe() {
	c.mu.Lock()
	if c.state != stateRunning || !c.runsProcess() || time.Since(c.lastProbe) < probeEvery {
		c.mu.Unlock()
		return
	}
	rp := c.spec.ReadinessProbe
	if rp != nil && time.Since(c.startedAt) < time.Duration(rp.InitialDelaySeconds)*time.Second {
		c.mu.Unlock()
		return
	}
	c.lastProbe = time.Now()
	admin := c.adminAddr
	c.mu.Unlock()

	var err error
	switch {
	case rp != nil && rp.HTTPGet != nil:
		err = c.probeHTTP(rp.HTTPGet)
	case rp != nil && rp.TCPSocket != nil:
		err = c.probeTCP(rp.TCPSocket)
	case c.certdrift || c.ratelimit:
		// No readinessProbe: ready once the first declared port answers (else once running).
		if len(c.spec.Ports) > 0 {
			err = c.probeTCP(&corev1.TCPSocketAction{Port: intstr.FromInt32(c.spec.Ports[0].ContainerPort)})
		}
	default:
		if admin == "" {
			admin = c.readAdminAddress()
		}
		switch {
		case admin != "":
			err = httpOK("http://" + admin + "/ready")
		case time.Since(c.startedAt) < adminGrace:
			// Envoy writes its admin address only once the admin listener is up; until then it
			// is starting, not ready (a pod reported Ready here refused connections in tests).
			err = errors.New("envoy admin address not written yet")
		}
		// An Envoy without an admin section never writes the address: after adminGrace the
		// process being alive is all there is to go by.
	}
	success, failure := int32(1), int32(3)
	if rp != nil {
		success, failure = max(rp.SuccessThreshold, 1), max(rp.FailureThreshold, 1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.probeOK++
		c.probeFail = 0
		if c.probeOK >= success {
			c.ready = true
		}
	} else {
		c.probeFail++
		c.probeOK = 0
		if c.probeFail >= failure || !c.ready {
			c.ready = false
		}
	}
}

// readAdminAddress reads --admin-address-path, which Envoy writes once its admin listens.
func (c *container) readAdminAddress() string {
	data, err := os.ReadFile(filepath.Join(c.dir, "admin-address"))
	if err != nil {
		return ""
	}
	addr := strings.TrimSpace(string(data))
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return ""
	}
	c.mu.Lock()
	c.adminAddr = addr
	c.mu.Unlock()
	return addr
}

func (c *container) probeHost(host string) string {
	if host == "" {
		return c.w.podIP.String()
	}
	return c.podNet().rewriteAddress(host)
}

func (c *container) probePort(p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return int(p.IntVal), nil
	}
	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no container port named %q", p.StrVal)
}

func (c *container) probeHTTP(g *corev1.HTTPGetAction) error {
	port, err := c.probePort(g.Port)
	if err != nil {
		return err
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return httpOK(scheme + "://" + net.JoinHostPort(c.probeHost(g.Host), strconv.Itoa(port)) + path)
}

func (c *container) probeTCP(t *corev1.TCPSocketAction) error {
	port, err := c.probePort(t.Port)
	if err != nil {
		return err
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.probeHost(t.Host), strconv.Itoa(port)), probeTimeout)
	if err != nil {
		return err
	}
	return conn.Close()
}

// probeClient skips certificate verification, as the kubelet's HTTPS probes do.
var probeClient = &http.Client{
	Timeout: probeTimeout,
	Transport: &http.Transport{
		TLSClientConfig:   insecureProbeTLS(),
		DisableKeepAlives: true,
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func httpOK(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	// The kubelet counts 200-399 as success.
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return nil
}

// status renders the container's status for the pod status.
func (c *container) status() corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := corev1.ContainerStatus{
		Name: c.spec.Name, Image: c.spec.Image, ImageID: imageID(c.spec.Image),
		ContainerID: c.containerID, RestartCount: c.restarts, Ready: c.ready,
		Started: ptr.To(c.state == stateRunning),
	}
	switch c.state {
	case stateRunning:
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
	case stateTerminated:
		s.State.Terminated = c.terminated.DeepCopy()
	default:
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.waitReason, Message: c.waitMessage}
	}
	if c.lastTerm != nil {
		s.LastTerminationState.Terminated = c.lastTerm.DeepCopy()
	}
	if c.state != stateRunning && c.containerID == "" {
		s.ContainerID = ""
	}
	return s
}

// imageID is a stable stand-in for the image digest the runtime would report.
func imageID(image string) string { return "testbed://" + image }

func insecureProbeTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the kubelet's HTTPS probes do not verify
}
