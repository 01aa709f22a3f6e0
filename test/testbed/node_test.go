package testbed

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/utils/ptr"
)

const testSyncDelay = 2 * time.Second

// TestNodeAgent runs real Envoy pods on the testbed's node agent: file-based SDS pods converge
// on a rotated Secret, static-TLS pods do not, subPath copies never change, a killed Envoy is
// restarted, and eviction honours PodDisruptionBudgets with the replacement serving the current
// Secret.
func TestNodeAgent(t *testing.T) {
	begin := time.Now()
	tb := StartT(t, Options{VolumeSyncDelay: testSyncDelay})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := tb.Client
	ca := certs.NewCA(t)
	v1 := ca.Leaf(t, certs.WithDNSNames("envoy.test"))
	v2 := ca.Leaf(t, certs.WithDNSNames("envoy.test"))

	ns := createPodNamespace(ctx, t, c, "envoy-pods")
	sds := envoyDeployment("sds", "tls", envoytest.Bootstrap(envoytest.Listener{
		Address: "0.0.0.0", Port: 8443,
		Chains: []envoytest.Chain{{SDS: &envoytest.SDSRef{Name: "server", Path: "/etc/envoy/sds.yaml", WatchedDir: "/certs"}}},
	}))
	static := envoyDeployment("static", "tls-static", envoytest.Bootstrap(envoytest.Listener{
		Address: "0.0.0.0", Port: 8443,
		Chains: []envoytest.Chain{{CertFile: "/certs/tls.crt", KeyFile: "/certs/tls.key"}},
	}))
	for _, d := range []workload{sds, static} {
		d.create(ctx, t, c, ns, v1)
	}
	sdsPods := waitReady(ctx, t, tb, ns, "app=sds")
	t.Logf("MEASURED: testbed start to 2 Envoy pods Ready: %s (testbed start %s)",
		time.Since(begin).Round(10*time.Millisecond), tb.StartDuration.Round(10*time.Millisecond))
	staticPods := waitReady(ctx, t, tb, ns, "app=static")

	t.Run("NodeRegistered", func(t *testing.T) { checkNode(ctx, t, tb) })

	t.Run("PodsServeTheirSecretOnOwnIP", func(t *testing.T) {
		ips := map[string]bool{}
		for _, p := range append(append([]corev1.Pod{}, sdsPods...), staticPods...) {
			checkPodStatus(t, tb, p)
			if ips[p.Status.PodIP] {
				t.Errorf("pod IP %s is used twice", p.Status.PodIP)
			}
			ips[p.Status.PodIP] = true
			if got := servedSerial(t, p.Status.PodIP, 8443); got != v1.Cert.SerialNumber.String() {
				t.Errorf("pod %s serves serial %s, want the Secret's %s", p.Name, got, v1.Cert.SerialNumber)
			}
		}
	})

	t.Run("EnvoyPaths", func(t *testing.T) {
		// Static tls_certificates show their file in /certs; file-based SDS (inlined by Envoy
		// 1.40 in /certs) shows its watched directory in /config_dump.
		checkEnvoyPaths(ctx, t, tb, ns, staticPods[0], "/certs", `"path": "/certs/tls.crt"`)
		checkEnvoyPaths(ctx, t, tb, ns, sdsPods[0], "/config_dump", `"path": "/certs"`)
	})

	t.Run("AdminIsLocalhostOnly", func(t *testing.T) {
		p := sdsPods[0]
		addr := adminAddress(t, tb, p)
		_, port, _ := net.SplitHostPort(addr)
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(p.Status.PodIP, port), time.Second); err == nil {
			conn.Close()
			t.Errorf("admin port %s answers on the pod IP %s; it is configured on 127.0.0.1", port, p.Status.PodIP)
		}
		portNum, _ := strconv.Atoi(port)
		conn, err := tb.DialPod(ctx, ns, p.Name, portNum)
		if err != nil {
			t.Fatalf("DialPod admin port %s: %v", port, err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET /ready HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
		resp, _ := io.ReadAll(io.LimitReader(conn, 4096))
		if !bytes.Contains(resp, []byte("LIVE")) {
			t.Errorf("GET /ready through DialPod: %q, want LIVE", resp)
		}
	})

	t.Run("PortForwardAndLogsThroughAPIServer", func(t *testing.T) {
		p := sdsPods[0]
		_, port, _ := net.SplitHostPort(adminAddress(t, tb, p))
		rt, upgrader, err := spdy.RoundTripperFor(tb.Config)
		if err != nil {
			t.Fatal(err)
		}
		u := c.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(p.Name).SubResource("portforward").URL()
		local, _, err := startForward(t, spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u), ":"+port)
		if err != nil {
			t.Fatalf("port-forward to the localhost-only admin port %s: %v", port, err)
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", local[0]))
		if err != nil {
			t.Fatalf("GET /ready through the port-forward: %v", err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("LIVE")) {
			t.Errorf("GET /ready through the port-forward: %d %q", resp.StatusCode, body)
		}
		logs, err := c.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "envoy"}).DoRaw(ctx)
		if err != nil || !bytes.Contains(logs, []byte("initializing epoch 0")) {
			t.Errorf("logs through the API server: err %v, %d bytes without Envoy's first line", err, len(logs))
		}
	})

	t.Run("NodeCannotReadUnrelatedSecret", func(t *testing.T) {
		unrelated := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns}, Data: map[string][]byte{"k": []byte("v")}}
		if _, err := c.CoreV1().Secrets(ns).Create(ctx, unrelated, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		nc := kubernetes.NewForConfigOrDie(tb.Nodes[0].nodeConfig(t, tb))
		if _, err := nc.CoreV1().Secrets(ns).Get(ctx, "unrelated", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("node reading a Secret no pod of it uses: %v, want Forbidden (Node authorizer)", err)
		}
		if _, err := nc.CoreV1().Secrets(ns).Get(ctx, "tls", metav1.GetOptions{}); err != nil {
			t.Errorf("node reading a Secret its pods mount: %v", err)
		}
	})

	// Rotate both Secrets; the SDS pods converge after the sync delay, the static ones never.
	updateSecret(ctx, t, c, ns, "tls", v2)
	updateSecret(ctx, t, c, ns, "tls-static", v2)
	rotated := time.Now()

	t.Run("SDSPodsConverge", func(t *testing.T) {
		for _, p := range sdsPods {
			pollT(ctx, t, "pod "+p.Name+" serving the rotated certificate", func() error {
				if got := servedSerial(t, p.Status.PodIP, 8443); got != v2.Cert.SerialNumber.String() {
					return fmt.Errorf("serves %s", got)
				}
				return nil
			})
		}
		t.Logf("MEASURED: both SDS pods converged %s after the Secret update (sync delay %s)", time.Since(rotated).Round(10*time.Millisecond), testSyncDelay)
	})

	t.Run("StaticPodsNeverConverge", func(t *testing.T) {
		for _, p := range staticPods {
			// The volume itself did update: the non-convergence is Envoy's.
			dir, err := tb.PodDir(ns, p.Name)
			if err != nil {
				t.Fatal(err)
			}
			pollT(ctx, t, "static pod "+p.Name+" volume updated", func() error {
				got, err := os.ReadFile(filepath.Join(dir, "volumes", "tls", "tls.crt"))
				if err != nil || !bytes.Equal(got, v2.CertPEM) {
					return fmt.Errorf("tls.crt not yet rotated (err %v)", err)
				}
				return nil
			})
		}
		time.Sleep(2 * time.Second) // well past Envoy's watch debounce
		for _, p := range staticPods {
			if got := servedSerial(t, p.Status.PodIP, 8443); got != v1.Cert.SerialNumber.String() {
				t.Errorf("static-TLS pod %s serves %s, want the old %s (static tls_certificates never reload)", p.Name, got, v1.Cert.SerialNumber)
			}
		}
	})

	t.Run("SubPathNeverUpdates", func(t *testing.T) {
		for _, p := range sdsPods {
			live, err := tb.ReadContainerFile(ns, p.Name, "envoy", "/certs/tls.crt")
			if err != nil || !bytes.Equal(live, v2.CertPEM) {
				t.Errorf("%s: /certs/tls.crt as Envoy sees it is not the rotated certificate (err %v)", tb.EnvoyPaths, err)
			}
			pinned, err := tb.ReadContainerFile(ns, p.Name, "envoy", "/pinned/tls.crt")
			if err != nil || !bytes.Equal(pinned, v1.CertPEM) {
				t.Errorf("%s: subPath mount /pinned/tls.crt changed after the rotation (err %v); a subPath mount never updates", tb.EnvoyPaths, err)
			}
		}
	})

	t.Run("KilledEnvoyIsRestarted", func(t *testing.T) {
		p := sdsPods[1]
		pid := envoyPID(t, p)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill Envoy pid %d: %v", pid, err)
		}
		var got corev1.ContainerStatus
		pollT(ctx, t, "restarted and Ready", func() error {
			pod, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(pod.Status.ContainerStatuses) != 1 {
				return fmt.Errorf("%d container statuses", len(pod.Status.ContainerStatuses))
			}
			got = pod.Status.ContainerStatuses[0]
			if got.RestartCount != 1 || !got.Ready || got.State.Running == nil {
				return fmt.Errorf("restartCount %d ready %v running %v", got.RestartCount, got.Ready, got.State.Running != nil)
			}
			return nil
		})
		last := got.LastTerminationState.Terminated
		if last == nil || last.ExitCode != 128+int32(syscall.SIGKILL) || last.ContainerID != "testbed://"+strconv.Itoa(pid) {
			t.Errorf("lastState.terminated = %+v, want exit code 137 of container testbed://%d", last, pid)
		}
		if got.ContainerID == last.ContainerID {
			t.Errorf("containerID %s did not change on restart", got.ContainerID)
		}
		if serial := servedSerial(t, p.Status.PodIP, 8443); serial != v2.Cert.SerialNumber.String() {
			t.Errorf("restarted Envoy serves %s, want the current %s", serial, v2.Cert.SerialNumber)
		}
	})

	t.Run("EvictionHonoursPDB", func(t *testing.T) {
		testEviction(ctx, t, tb, ns, v2)
	})
}

// workload is a Deployment of 2 Envoys whose bootstrap and SDS file come from a ConfigMap and
// whose certificate is a kubernetes.io/tls Secret volume at /certs.
type workload struct {
	name, secret, bootstrap string
}

func envoyDeployment(name, secret, bootstrap string) workload {
	return workload{name: name, secret: secret, bootstrap: bootstrap}
}

func (w workload) create(ctx context.Context, t *testing.T, c kubernetes.Interface, ns string, leaf *certs.Leaf) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: w.name + "-config", Namespace: ns},
		Data: map[string]string{
			"envoy.yaml": w.bootstrap,
			"sds.yaml":   string(envoytest.TLSSecret("server", "/certs/tls.crt", "/certs/tls.key", "")),
		},
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: w.secret, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM},
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret: %v", err)
	}
	labels := map[string]string{"app": w.name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Containers: []corev1.Container{{
						Name:  "envoy",
						Image: "envoyproxy/envoy:v" + envoytest.DefaultVersion,
						Args:  []string{"-c", "/etc/envoy/envoy.yaml", "--log-level", "info"},
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "config", MountPath: "/etc/envoy", ReadOnly: true},
							{Name: "tls", MountPath: "/certs", ReadOnly: true},
							// Index 2: the subPath copy checked by SubPathNeverUpdates.
							{Name: "tls", MountPath: "/pinned/tls.crt", SubPath: "tls.crt", ReadOnly: true},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}},
						{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: w.secret}}},
					},
				},
			},
		},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
}

func createPodNamespace(ctx context.Context, t *testing.T, c kubernetes.Interface, name string) string {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	// Pods are refused until the namespace's default ServiceAccount exists.
	pollT(ctx, t, "ServiceAccount "+name+"/default", func() error {
		_, err := c.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	return name
}

func waitReady(ctx context.Context, t *testing.T, tb *Testbed, ns, selector string) []corev1.Pod {
	t.Helper()
	start := time.Now()
	pods, err := tb.WaitPodsReady(ctx, ns, selector)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pods %q Ready after %s", len(pods), selector, time.Since(start).Round(10*time.Millisecond))
	return pods
}

func updateSecret(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, leaf *certs.Leaf) {
	t.Helper()
	s, err := c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM}
	if _, err := c.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update Secret %s: %v", name, err)
	}
}

// servedSerial dials addr:port with plain crypto/tls and returns the leaf's serial ("" and a
// logged error when the handshake fails).
func servedSerial(t *testing.T, ip string, port int) string {
	t.Helper()
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(ip, strconv.Itoa(port)), &tls.Config{
		ServerName:         "envoy.test",
		InsecureSkipVerify: true, // the test compares serials; trust is not the question here
	})
	if err != nil {
		t.Logf("TLS dial %s:%d: %v", ip, port, err)
		return ""
	}
	defer conn.Close()
	chain := conn.ConnectionState().PeerCertificates
	if len(chain) == 0 {
		return ""
	}
	return chain[0].SerialNumber.String()
}

func checkNode(ctx context.Context, t *testing.T, tb *Testbed) {
	n := tb.Nodes[0]
	node, err := tb.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !nodeReady(node) {
		t.Errorf("node %s is not Ready: %+v", n.Name, node.Status.Conditions)
	}
	var internal string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	if internal != n.HostIP.String() || !n.HostIP.IsLoopback() {
		t.Errorf("InternalIP %q, want the node's loopback address %s", internal, n.HostIP)
	}
	if got := int(node.Status.DaemonEndpoints.KubeletEndpoint.Port); got != n.KubeletPort || got == 0 {
		t.Errorf("kubelet endpoint port %d, want %d", got, n.KubeletPort)
	}
	lease, err := tb.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node Lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != n.Name || lease.Spec.RenewTime == nil {
		t.Errorf("Lease spec %+v, want holder %s with a renew time", lease.Spec, n.Name)
	}
}

func checkPodStatus(t *testing.T, tb *Testbed, p corev1.Pod) {
	t.Helper()
	if p.Spec.NodeName != tb.Nodes[0].Name || p.Status.HostIP != tb.Nodes[0].HostIP.String() {
		t.Errorf("pod %s on node %q hostIP %q", p.Name, p.Spec.NodeName, p.Status.HostIP)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if !hasCondition(p.Status.Conditions, ct) {
			t.Errorf("pod %s condition %s not True: %+v", p.Name, ct, p.Status.Conditions)
		}
	}
	if p.Status.StartTime == nil || len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != p.Status.PodIP {
		t.Errorf("pod %s startTime %v podIPs %v podIP %s", p.Name, p.Status.StartTime, p.Status.PodIPs, p.Status.PodIP)
	}
	cs := p.Status.ContainerStatuses
	if len(cs) != 1 || cs[0].State.Running == nil || !cs[0].Ready || cs[0].Started == nil || !*cs[0].Started ||
		!strings.HasPrefix(cs[0].ContainerID, "testbed://") || cs[0].Image != p.Spec.Containers[0].Image {
		t.Errorf("pod %s container statuses %+v", p.Name, cs)
	}
}

func adminAddress(t *testing.T, tb *Testbed, p corev1.Pod) string {
	t.Helper()
	dir, err := tb.PodDir(p.Namespace, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "containers", "envoy", "admin-address"))
	if err != nil {
		t.Fatalf("admin address of %s: %v", p.Name, err)
	}
	return strings.TrimSpace(string(data))
}

func envoyPID(t *testing.T, p corev1.Pod) int {
	t.Helper()
	id := p.Status.ContainerStatuses[0].ContainerID
	pid, err := strconv.Atoi(strings.TrimPrefix(id, "testbed://"))
	if err != nil {
		t.Fatalf("containerID %q names no pid", id)
	}
	return pid
}

func testEviction(ctx context.Context, t *testing.T, tb *Testbed, ns string, current *certs.Leaf) {
	c := tb.Client
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "sds", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sds"}},
		},
	}
	pdb, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPDB := func(allowed int32) {
		pollT(ctx, t, fmt.Sprintf("PDB disruptionsAllowed=%d", allowed), func() error {
			got, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.ObservedGeneration != got.Generation || got.Status.DisruptionsAllowed != allowed || got.Status.CurrentHealthy != 2 {
				return fmt.Errorf("status %+v (generation %d)", got.Status, got.Generation)
			}
			return nil
		})
	}
	waitPDB(0)
	pods, err := tb.WaitPodsReady(ctx, ns, "app=sds")
	if err != nil {
		t.Fatal(err)
	}
	victim := pods[0]
	evict := func() error {
		return c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: ns}})
	}
	if err := evict(); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction under minAvailable=2 with 2 healthy pods: %v, want 429 TooManyRequests", err)
	}

	pdb, err = c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable = nil, ptr.To(intstr.FromInt32(1))
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPDB(1)
	evicted := time.Now()
	if err := evict(); err != nil {
		t.Fatalf("eviction under maxUnavailable=1: %v", err)
	}
	pollT(ctx, t, "evicted pod gone", func() error {
		_, err := c.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
	if gone := time.Since(evicted); gone > 5*time.Second+3*time.Second {
		t.Errorf("evicted pod took %s to go, grace period is 5s", gone)
	}
	after, err := tb.WaitPodsReady(ctx, ns, "app=sds")
	if err != nil {
		t.Fatal(err)
	}
	var replacement *corev1.Pod
	for i := range after {
		if after[i].Name != pods[0].Name && after[i].Name != pods[1].Name {
			replacement = &after[i]
		}
	}
	if replacement == nil {
		t.Fatalf("no replacement pod among %d Ready pods", len(after))
	}
	t.Logf("replacement %s Ready %s after the eviction", replacement.Name, time.Since(evicted).Round(10*time.Millisecond))
	if got := servedSerial(t, replacement.Status.PodIP, 8443); got != current.Cert.SerialNumber.String() {
		t.Errorf("replacement pod serves %s, want the current Secret's %s", got, current.Cert.SerialNumber)
	}
}

func pollT(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	poll(ctx, t, what, check)
}

// nodeConfig is a fresh client configuration with the node's identity, for authorization checks.
func (n *Node) nodeConfig(t *testing.T, tb *Testbed) *rest.Config {
	t.Helper()
	cfg, err := tb.ClientConfig("system:node:"+n.Name, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// checkEnvoyPaths checks the paths an Envoy admin endpoint reports in the testbed's path mode:
// the container path (want) and nothing of the node's directories with the mount namespaces, the
// node's volume directory with rewriting. With the mount namespaces it also checks the volume as the container sees it: the
// kubelet's "..data" layout intact, and read-only.
func checkEnvoyPaths(ctx context.Context, t *testing.T, tb *Testbed, ns string, p corev1.Pod, endpoint, want string) {
	{
		_, port, _ := net.SplitHostPort(adminAddress(t, tb, p))
		portNum, _ := strconv.Atoi(port)
		body, err := adminGet(ctx, tb, ns, p.Name, portNum, endpoint)
		if err != nil {
			t.Fatalf("pod %s: GET %s: %v", p.Name, endpoint, err)
		}
		containerPath := strings.Contains(body, want)
		nodePath := strings.Contains(body, tb.Dir)
		switch tb.EnvoyPaths {
		case PathsMountNS:
			if !containerPath || nodePath {
				t.Errorf("pod %s in %s mode: %s = %s, want the container path (%s) and nothing under %s", p.Name, tb.EnvoyPaths, endpoint, body, want, tb.Dir)
			}
			var data []byte
			data, err = tb.ReadContainerFile(ns, p.Name, "envoy", "/certs/..data/tls.crt")
			if err != nil || !bytes.Contains(data, []byte("BEGIN CERTIFICATE")) {
				t.Errorf("pod %s: /certs/..data/tls.crt in the container: %v (the kubelet layout must be intact)", p.Name, err)
			}
			pid := envoyPID(t, p)
			err = os.WriteFile(fmt.Sprintf("/proc/%d/root/certs/written", pid), []byte("x"), 0o600)
			if !errors.Is(err, syscall.EROFS) {
				t.Errorf("pod %s: writing into the Secret mount /certs: %v, want EROFS (read-only)", p.Name, err)
			}
		case PathsRewrite:
			if containerPath || !nodePath {
				t.Errorf("pod %s in %s mode: %s = %s, want node paths under %s, not %s", p.Name, tb.EnvoyPaths, endpoint, body, tb.Dir, want)
			}
		default:
			t.Errorf("testbed path mode %q", tb.EnvoyPaths)
		}
	}
}
