package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/certdrift/certdrift/test/envoytest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeName is the name of the testbed's i-th node (1-based).
func NodeName(i int) string { return fmt.Sprintf("testbed-node-%d", i) }

// startNodes starts the binder and opts.Nodes node agents (default 1, none if negative).
func (tb *Testbed) startNodes(ctx context.Context, opts Options) error {
	count := opts.Nodes
	if count == 0 {
		count = 1
	}
	if count < 0 {
		return nil
	}
	mode, err := resolvePathMode(opts.EnvoyPaths)
	if err != nil {
		return err
	}
	tb.EnvoyPaths = mode
	step := time.Now()
	schedCfg, err := tb.ClientConfig(SchedulerUser)
	if err != nil {
		return err
	}
	schedClient, err := kubernetes.NewForConfig(schedCfg)
	if err != nil {
		return fmt.Errorf("build scheduler client: %w", err)
	}
	if err := os.MkdirAll(tb.lay.logDir(), 0o700); err != nil {
		return fmt.Errorf("create log directory: %w", err)
	}
	binderLog, err := tb.openAgentLog("binder")
	if err != nil {
		return err
	}
	servicesLog, err := tb.openAgentLog("services")
	if err != nil {
		return err
	}
	tb.services = newServiceRouter(tb.Client, servicesLog)
	if tb.binder, err = StartBinder(ctx, schedClient, binderLog); err != nil {
		return err
	}
	for i := 1; i <= count; i++ {
		name := NodeName(i)
		// A node authenticates as a kubelet does, so the Node authorizer and NodeRestriction
		// limit it to its own Node, Lease, pods and the Secrets those pods reference.
		cfg, err := tb.ClientConfig("system:node:"+name, "system:nodes")
		if err != nil {
			return err
		}
		logger, err := tb.openAgentLog(name)
		if err != nil {
			return err
		}
		ksCfg, err := tb.KubeletServerConfig(name)
		if err != nil {
			return err
		}
		ksCfg.Logger = logger
		n, err := StartNode(ctx, NodeOptions{
			Name:             name,
			Dir:              filepath.Join(tb.Dir, "nodes", name),
			Config:           cfg,
			VolumeSyncDelay:  opts.VolumeSyncDelay,
			KubeletServer:    &ksCfg,
			IssueServingCert: tb.IssueServingCert,
			Logger:           logger,
			CertdriftBinary:  opts.CertdriftBinary,
			ResolveService:   tb.services.Resolve,
			PathMode:         mode,
		})
		if err != nil {
			return err
		}
		tb.Nodes = append(tb.Nodes, n)
	}
	tb.log.Info("nodes ready", "count", count, "envoy_paths", string(mode), "seconds", time.Since(step).Seconds())
	return nil
}

// openAgentLog opens Dir/logs/<name>.log for an in-process agent (binder, node).
func (tb *Testbed) openAgentLog(name string) (*slog.Logger, error) {
	logPath := filepath.Join(tb.lay.logDir(), name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open agent log %s: %w", logPath, err)
	}
	tb.nodeLogs = append(tb.nodeLogs, f)
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})), nil
}

// stopNodes stops the node agents and the binder; Stop calls it before the control plane goes.
func (tb *Testbed) stopNodes() {
	for _, n := range tb.Nodes {
		n.Stop()
	}
	if tb.binder != nil {
		tb.binder.Stop()
	}
	if tb.services != nil {
		tb.services.Close()
	}
	for _, f := range tb.nodeLogs {
		f.Close()
	}
}

// node finds the node agent running pod ns/name.
func (tb *Testbed) node(ns, name string) (*Node, error) {
	for _, n := range tb.Nodes {
		if _, err := n.worker(ns, name); err == nil {
			return n, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s is not running on any testbed node", ns, name)
}

// PodDir is the node directory of the running pod ns/name: volumes/<volume>/ holds the projected
// volumes, containers/<container>/ the rendered Envoy config and logs.
func (tb *Testbed) PodDir(ns, name string) (string, error) {
	n, err := tb.node(ns, name)
	if err != nil {
		return "", err
	}
	return n.PodDir(ns, name)
}

// PodLog returns a container's log (Envoy's log file), with private key material redacted.
func (tb *Testbed) PodLog(ns, name, container string) (string, error) {
	n, err := tb.node(ns, name)
	if err != nil {
		return "", err
	}
	path, err := n.containerLogPath(ns, name, container, false)
	if err != nil {
		return "", err
	}
	data, err := readTail(path, maxLogRead)
	if err != nil {
		return "", fmt.Errorf("read log of %s/%s container %s: %w", ns, name, container, err)
	}
	return envoytest.Redacted(string(data)), nil
}

// DialPod connects to port of pod ns/name from inside the pod (see Node.DialPod).
func (tb *Testbed) DialPod(ctx context.Context, ns, name string, port int) (net.Conn, error) {
	n, err := tb.node(ns, name)
	if err != nil {
		return nil, err
	}
	return n.DialPod(ctx, ns, name, port)
}

func readTail(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > limit {
		if _, err := f.Seek(fi.Size()-limit, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// WaitPodsReady waits until the pods in ns matching selector (a label selector) are all Running
// and Ready, none is terminating, and every ReplicaSet owning them has as many as it wants. It
// returns those pods.
func (tb *Testbed) WaitPodsReady(ctx context.Context, ns, selector string) ([]corev1.Pod, error) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		pods, err := tb.podsReady(ctx, ns, selector)
		if err == nil {
			return pods, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for pods %q in %s to be Ready: %w; last: %v", selector, ns, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func (tb *Testbed) podsReady(ctx context.Context, ns, selector string) ([]corev1.Pod, error) {
	list, err := tb.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, errors.New("no pods")
	}
	perOwner := map[string]int32{}
	var notReady []string
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			notReady = append(notReady, p.Name+" terminating")
			continue
		}
		if p.Status.Phase != corev1.PodRunning || !hasCondition(p.Status.Conditions, corev1.PodReady) {
			notReady = append(notReady, fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, hasCondition(p.Status.Conditions, corev1.PodReady)))
		}
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "ReplicaSet" {
			perOwner[ref.Name]++
		}
	}
	if len(notReady) > 0 {
		return nil, fmt.Errorf("not ready: %s", strings.Join(notReady, ", "))
	}
	for rsName, have := range perOwner {
		rs, err := tb.Client.AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if want := ptrValue(rs.Spec.Replicas, 1); have != want {
			return nil, fmt.Errorf("ReplicaSet %s has %d of %d pods", rsName, have, want)
		}
	}
	return list.Items, nil
}

func ptrValue[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// dumpNodeLogs writes the end of each node agent's log and of every pod container's log
// (private keys redacted) to w.
func (tb *Testbed) dumpNodeLogs(w io.Writer, n int) {
	if tb.binder != nil {
		path := filepath.Join(tb.lay.logDir(), "binder.log")
		fmt.Fprintf(w, "--- last %d lines of binder (%s) ---\n%s\n", n, path, tailFile(path, n))
	}
	for _, node := range tb.Nodes {
		path := filepath.Join(tb.lay.logDir(), node.Name+".log")
		fmt.Fprintf(w, "--- last %d lines of node agent %s (%s) ---\n%s\n", n, node.Name, path, tailFile(path, n))
		for _, dir := range node.podDirs() {
			containers, _ := os.ReadDir(filepath.Join(dir, "containers"))
			for _, c := range containers {
				for _, f := range []string{"envoy.log", "console.log"} {
					p := filepath.Join(dir, "containers", c.Name(), f)
					if _, err := os.Stat(p); err != nil {
						continue
					}
					fmt.Fprintf(w, "--- last %d lines of %s ---\n%s\n", n, p, envoyLogTail(p, n))
				}
			}
		}
	}
}

// envoyStartupListing matches Envoy's start-up inventory lines (extensions, header maps), which
// say nothing about a failure.
var envoyStartupListing = regexp.MustCompile(`^\[[^]]*\]\[[0-9]+\]\[info\]\[main\] \[[^]]*\]   `)

// envoyLogTail is the last n useful lines of an Envoy log, private keys redacted, long lines cut.
func envoyLogTail(path string, n int) string {
	var keep []string
	for _, l := range strings.Split(envoytest.Redacted(tailFile(path, 4*n+200)), "\n") {
		if envoyStartupListing.MatchString(l) {
			continue
		}
		if len(l) > 400 {
			l = l[:400] + "…"
		}
		keep = append(keep, l)
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "\n")
}

// ReadContainerFile reads a file as a running container of pod ns/name sees it at containerPath
// (for example "/certs/tls.crt"), in either path mode: through the process's own mount namespace
// (/proc/<pid>/root) in PathsMountNS, through the node path its mount is rewritten to in
// PathsRewrite. Tests use it to check what Envoy can read, such as a subPath mount's pinned
// version after a rotation.
func (tb *Testbed) ReadContainerFile(ns, name, container, containerPath string) ([]byte, error) {
	n, err := tb.node(ns, name)
	if err != nil {
		return nil, err
	}
	return n.ReadContainerFile(ns, name, container, containerPath)
}

// ReadContainerFile is Testbed.ReadContainerFile for a pod of this node.
func (n *Node) ReadContainerFile(ns, name, container, containerPath string) ([]byte, error) {
	w, err := n.worker(ns, name)
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(containerPath) {
		return nil, fmt.Errorf("container path %q is not absolute", containerPath)
	}
	dir := filepath.Join(w.dir, "containers", container)
	if n.pathMode == PathsMountNS {
		pid, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			return nil, fmt.Errorf("container %q of pod %s/%s has not started: %w", container, ns, name, err)
		}
		return os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "root", containerPath))
	}
	pod, _ := w.current()
	if pod == nil {
		return nil, fmt.Errorf("pod %s/%s is not known yet", ns, name)
	}
	for _, c := range append(slicesClone(pod.Spec.Containers), pod.Spec.InitContainers...) {
		if c.Name != container {
			continue
		}
		var ms []mount
		for i, vm := range c.VolumeMounts {
			host := w.volumeDir(vm.Name)
			if vm.SubPath != "" || vm.SubPathExpr != "" {
				host = filepath.Join(dir, "subpaths", strconv.Itoa(i))
			}
			ms = append(ms, mount{path: vm.MountPath, host: host})
		}
		p, _ := newMountTable(ms).rewrite(containerPath)
		return os.ReadFile(p)
	}
	return nil, fmt.Errorf("pod %s/%s has no container %q", ns, name, container)
}
