package testbed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// NodeOptions configure one node agent.
type NodeOptions struct {
	// Name is the Node name ("testbed-node-1").
	Name string
	// Dir receives the per-pod directories (Dir/pods/<namespace>_<pod>_<uid>/).
	Dir string
	// Config authenticates as the node: user system:node:<Name> in group system:nodes, so the
	// Node authorizer and the NodeRestriction admission plugin treat the agent as a kubelet.
	Config *rest.Config
	// VolumeSyncDelay is how often Secret, ConfigMap and projected volumes are re-projected,
	// hence how late a pod sees an update (the kubelet's is up to about a minute). Default 2s.
	VolumeSyncDelay time.Duration
	// KubeletPort is the port published in status.daemonEndpoints.kubeletEndpoint, where the
	// kubelet server listens on the node's InternalIP. Default: a free port on that address.
	KubeletPort int
	// KubeletServer, when set, is the base configuration of the node's kubelet server
	// (kubeletserver.go): the agent listens on its HostIP with a serving certificate for that
	// address from IssueServingCert, answers LookupPod and ContainerLogPath, and dials pods with
	// DialPod. KubeletPort is then the server's port.
	KubeletServer    *KubeletServerConfig
	IssueServingCert func(cn string, hosts ...string) (certPEM, keyPEM []byte, err error)
	// Logger receives the agent's log. Default: discarded.
	Logger *slog.Logger
	// CertdriftBinary is the certdrift executable run for containers whose image is certdrift's
	// (containers_certdrift.go); without it such containers fail to start, saying so.
	CertdriftBinary string
	// ResolveService maps a Service's cluster DNS name and port in an Envoy config to an address
	// that reaches it (the testbed's service relays, services.go). Default: names stay as they
	// are.
	ResolveService func(host string, port int) (netip.AddrPort, bool)
	// PathMode is how Envoy containers see their volumes (envoypaths.go): PathsAuto (root:
	// PathsMountNS, else PathsRewrite; $CERTDRIFT_TESTBED_PATHS overrides), or either mode.
	PathMode PathMode
}

// Node is a running node agent: the testbed's kubelet. It registers a Node, heartbeats its
// Lease, and runs the pods bound to it (see node_pod.go).
type Node struct {
	Name string
	// HostIP is the node's InternalIP, 127.0.N.1; its pods get 127.0.N.2-254.
	HostIP      netip.Addr
	Dir         string
	KubeletPort int

	client    kubernetes.Interface
	syncDelay time.Duration
	// apiServer is the API server URL certdrift pods reach in-cluster; certdriftBinary runs them.
	apiServer, certdriftBinary string
	resolveService             func(host string, port int) (netip.AddrPort, bool)
	pathMode                   PathMode
	log                        *slog.Logger
	subnet                     *subnetClaim
	ctx                        context.Context
	cancel                     context.CancelFunc
	wg                         sync.WaitGroup
	pods                       cache.Indexer
	server                     *KubeletServer

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	usedIPs [256]bool
	lastIP  byte
	stopped bool
}

const (
	leaseDuration   = 40 * time.Second
	leaseRenewEvery = 10 * time.Second
	nodeStatusEvery = time.Minute
)

// StartNode registers the node and starts running the pods bound to it.
func StartNode(ctx context.Context, opts NodeOptions) (*Node, error) {
	if opts.VolumeSyncDelay <= 0 {
		opts.VolumeSyncDelay = 2 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mode, err := resolvePathMode(opts.PathMode)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", opts.Name, err)
	}
	client, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("node %s: build client: %w", opts.Name, err)
	}
	subnet, err := claimSubnet()
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", opts.Name, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	n := &Node{
		Name: opts.Name, HostIP: subnet.hostIP(), Dir: opts.Dir, KubeletPort: opts.KubeletPort,
		client: client, syncDelay: opts.VolumeSyncDelay, log: log.With("node", opts.Name),
		apiServer: opts.Config.Host, certdriftBinary: opts.CertdriftBinary, resolveService: opts.ResolveService,
		pathMode: mode, subnet: subnet, ctx: runCtx, cancel: cancel, workers: map[types.UID]*podWorker{}, lastIP: 1,
	}
	if err := n.start(ctx, opts); err != nil {
		n.Stop()
		return nil, fmt.Errorf("start node %s: %w", opts.Name, err)
	}
	return n, nil
}

// PathMode is how this node's Envoy containers see their volumes: PathsMountNS or PathsRewrite.
func (n *Node) PathMode() PathMode { return n.pathMode }

func (n *Node) start(ctx context.Context, opts NodeOptions) error {
	if err := os.MkdirAll(filepath.Join(n.Dir, "pods"), 0o755); err != nil {
		return fmt.Errorf("create node directory: %w", err)
	}
	if opts.KubeletServer != nil {
		if err := n.startKubeletServer(*opts.KubeletServer, opts.IssueServingCert); err != nil {
			return err
		}
	}
	if n.KubeletPort == 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(n.HostIP.String(), "0"))
		if err != nil {
			return fmt.Errorf("reserve a kubelet port on %s: %w", n.HostIP, err)
		}
		n.KubeletPort = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	if err := n.register(ctx); err != nil {
		return err
	}
	if err := n.renewLease(ctx); err != nil {
		return err
	}
	n.wg.Add(1)
	go n.heartbeat()

	factory := informers.NewSharedInformerFactoryWithOptions(n.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", n.Name).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.podChanged(obj) },
		UpdateFunc: func(_, obj any) { n.podChanged(obj) },
		DeleteFunc: func(obj any) { n.podDeleted(obj) },
	}); err != nil {
		return fmt.Errorf("watch pods bound to the node: %w", err)
	}
	n.pods = inf.GetIndexer()
	factory.Start(n.ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("pod cache did not sync: %w", ctx.Err())
	}
	n.log.Info("node ready", "host_ip", n.HostIP.String(), "kubelet_port", n.KubeletPort)
	return nil
}

// Stop stops every pod's processes (SIGTERM, then SIGKILL after a short grace: the testbed is
// going away, nobody waits for a drain), stops the heartbeat and releases the node's addresses.
// The Node object is left in the API: the control plane stops right after.
func (n *Node) Stop() {
	n.mu.Lock()
	n.stopped = true
	workers := make([]*podWorker, 0, len(n.workers))
	for _, w := range n.workers {
		workers = append(workers, w)
	}
	n.mu.Unlock()
	for _, w := range workers {
		w.shutdown()
	}
	if n.server != nil {
		if err := n.server.Close(); err != nil {
			n.log.Warn("close kubelet server", "err", err)
		}
	}
	n.cancel()
	n.wg.Wait()
	n.subnet.release()
}

func (n *Node) nodeObject() *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(strconv.Itoa(runtime.NumCPU())),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"),
	}
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
			"kubernetes.io/hostname": n.Name,
			"kubernetes.io/os":       runtime.GOOS,
			"kubernetes.io/arch":     runtime.GOARCH,
		}},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "testbed node agent"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "testbed node agent"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "testbed node agent"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "testbed node agent is posting ready status"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: n.HostIP.String()},
				{Type: corev1.NodeHostName, Address: n.Name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(n.KubeletPort)}},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          KubeVersion,
				OperatingSystem:         runtime.GOOS,
				Architecture:            runtime.GOARCH,
				ContainerRuntimeVersion: "testbed://" + KubeVersion,
				OSImage:                 "certdrift testbed",
			},
		},
	}
}

// register creates the Node as a kubelet does (create, then post status), or takes over an
// existing one of the same name.
func (n *Node) register(ctx context.Context) error {
	want := n.nodeObject()
	got, err := n.client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = n.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("register Node %s: %w", n.Name, err)
	}
	got.Status = want.Status
	if _, err := n.client.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("post status of Node %s: %w", n.Name, err)
	}
	return nil
}

func (n *Node) renewLease(ctx context.Context) error {
	leases := n.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(n.Name),
		LeaseDurationSeconds: ptr.To(int32(leaseDuration / time.Second)),
		RenewTime:            &now,
	}
	lease, err := leases.Get(ctx, n.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: corev1.NamespaceNodeLease}, Spec: spec}
		if node, err := n.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err == nil {
			lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: node.UID}}
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create Lease %s/%s: %w", corev1.NamespaceNodeLease, n.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get Lease %s/%s: %w", corev1.NamespaceNodeLease, n.Name, err)
	}
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = spec.HolderIdentity, spec.LeaseDurationSeconds, spec.RenewTime
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew Lease %s/%s: %w", corev1.NamespaceNodeLease, n.Name, err)
	}
	return nil
}

// heartbeat renews the Lease every 10s and reposts the node status every minute, the kubelet's
// defaults; nothing in the testbed (no node lifecycle controller) would mark the node NotReady
// without them, but certdrift and people reading `kubectl get nodes` see a live node.
func (n *Node) heartbeat() {
	defer n.wg.Done()
	lease := time.NewTicker(leaseRenewEvery)
	defer lease.Stop()
	status := time.NewTicker(nodeStatusEvery)
	defer status.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-lease.C:
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			if err := n.renewLease(ctx); err != nil && n.ctx.Err() == nil {
				n.log.Warn("lease renewal failed", "err", err)
			}
			cancel()
		case <-status.C:
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			if err := n.register(ctx); err != nil && n.ctx.Err() == nil {
				n.log.Warn("node status update failed", "err", err)
			}
			cancel()
		}
	}
}

func (n *Node) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	w := n.workers[pod.UID]
	if w == nil {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return // finished before this agent started: nothing to run
		}
		m, err := n.allocateIPLocked()
		if err != nil {
			n.log.Error("cannot run pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			return
		}
		w = newPodWorker(n, pod, m)
		n.workers[pod.UID] = w
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			w.run()
			n.mu.Lock()
			delete(n.workers, w.uid)
			n.usedIPs[m] = false
			n.mu.Unlock()
		}()
	}
	w.setPod(pod)
}

func (n *Node) podDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	n.mu.Lock()
	w := n.workers[pod.UID]
	n.mu.Unlock()
	if w != nil {
		w.objectGone()
	}
}

// allocateIPLocked hands out the next free host number, round robin, so that a just-freed pod
// IP is not reused at once (a client still holding the old address would reach the new pod).
func (n *Node) allocateIPLocked() (byte, error) {
	for i := 1; i <= 253; i++ {
		m := byte(2 + (int(n.lastIP)-2+i)%253) // lastIP starts at 1, so the first pod gets .2
		if !n.usedIPs[m] {
			n.usedIPs[m], n.lastIP = true, m
			return m, nil
		}
	}
	return 0, errors.New("all 253 pod addresses of the node are in use")
}

// worker finds the running pod ns/name.
func (n *Node) worker(ns, name string) (*podWorker, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.workers {
		if w.namespace == ns && w.name == name {
			return w, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s is not running on node %s", ns, name, n.Name)
}

// DialPod connects to port of pod ns/name as the kubelet's port-forward does, from inside the
// pod's network namespace: first the pod's private localhost (127.1.N.M), where listeners
// configured on 127.0.0.1 live, then the pod IP. Its signature is the dial function the kubelet
// server (kubeletserver.go) takes.
func (n *Node) DialPod(ctx context.Context, namespace, pod string, port int) (net.Conn, error) {
	w, err := n.worker(namespace, pod)
	if err != nil {
		return nil, err
	}
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("dial pod %s/%s: port %d out of range", namespace, pod, port)
	}
	var d net.Dialer
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	local := net.JoinHostPort(w.localIP.String(), strconv.Itoa(port))
	conn, err := d.DialContext(ctx, "tcp", local)
	if err == nil {
		return conn, nil
	}
	public := net.JoinHostPort(w.podIP.String(), strconv.Itoa(port))
	conn, err2 := d.DialContext(ctx, "tcp", public)
	if err2 == nil {
		return conn, nil
	}
	return nil, fmt.Errorf("dial pod %s/%s port %d: localhost %s: %v; pod IP %s: %w", namespace, pod, port, local, err, public, err2)
}

// PodDir returns the directory of the running pod ns/name (volumes/, containers/, subpaths/).
func (n *Node) PodDir(ns, name string) (string, error) {
	w, err := n.worker(ns, name)
	if err != nil {
		return "", err
	}
	return w.dir, nil
}

// podDirs lists the directories of every pod the node ever ran, for log dumps.
func (n *Node) podDirs() []string {
	entries, err := os.ReadDir(filepath.Join(n.Dir, "pods"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(n.Dir, "pods", e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

func (n *Node) startKubeletServer(cfg KubeletServerConfig, issue func(string, ...string) ([]byte, []byte, error)) error {
	if issue == nil {
		return errors.New("kubelet server: NodeOptions.IssueServingCert is required")
	}
	var err error
	cfg.Host, cfg.Port = n.HostIP.String(), n.KubeletPort
	if cfg.CertPEM, cfg.KeyPEM, err = issue("kubelet-"+n.Name, n.HostIP.String(), n.Name); err != nil {
		return fmt.Errorf("kubelet serving certificate for %s: %w", n.HostIP, err)
	}
	cfg.NodeName = n.Name
	cfg.LookupPod = func(ns, name string) (string, bool) {
		w, err := n.worker(ns, name)
		if err != nil {
			return "", false
		}
		return string(w.uid), true
	}
	cfg.ContainerLogPath = n.containerLogPath
	s, err := NewKubeletServer(cfg, func(ctx context.Context, ns, pod string, port int32) (net.Conn, error) {
		return n.DialPod(ctx, ns, pod, int(port))
	})
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		s.Close()
		return err
	}
	n.server, n.KubeletPort = s, s.Port()
	return nil
}

// containerLogPath is the Envoy log of a container (kubectl logs). Instances share one file,
// appended across restarts, so previous=true returns it too.
func (n *Node) containerLogPath(ns, pod, container string, _ bool) (string, error) {
	w, err := n.worker(ns, pod)
	if err != nil {
		return "", err
	}
	return w.containerLog(container)
}
