package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/probe/kube/adminaccess"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

// Fleet mode (issue 20): one Deployment of real Envoys on the testbed's node agents, each with a
// static TLS context serving two SNIs from a mounted kubernetes.io/tls Secret and its admin on
// the pod IP. Sizes come from the environment so that CI runs a few pods and a measurement runs
// the 200 (or 1,000 across 4 node agents):
//
//	CERTDRIFT_FLEET_PODS=200 CERTDRIFT_SCALE_RUNS=3 nice -n 10 go test ./test/scale/ -run TestFleetScale -v -timeout 30m
//	CERTDRIFT_FLEET_PODS=1000 CERTDRIFT_FLEET_NODES=4 … (the 1,000-pod target)
//
// CERTDRIFT_FLEET_PROFILE=<file> writes a CPU profile of the in-process rounds;
// CERTDRIFT_FLEET_BINS and CERTDRIFT_FLEET_HELPERS compare builds (below).
const (
	fleetPodsEnv    = "CERTDRIFT_FLEET_PODS"
	fleetNodesEnv   = "CERTDRIFT_FLEET_NODES"
	fleetProfileEnv = "CERTDRIFT_FLEET_PROFILE"
	// fleetHelperEnv makes the test binary a child that runs serve-like rounds in process (see
	// TestFleetRoundsHelper), so that its CPU is certdrift's alone: the node agents (the testbed's
	// kubelets and their port-forward servers) run in the parent.
	fleetHelperEnv = "CERTDRIFT_FLEET_HELPER"
	fleetNS        = "fleet"
	// fleetBinsEnv ("before=/tmp/a,after=/tmp/b") compares certdrift binaries interleaved in one
	// run; fleetHelpersEnv does the same for the rounds helper (test binaries from go test -c).
	fleetBinsEnv    = "CERTDRIFT_FLEET_BINS"
	fleetHelpersEnv = "CERTDRIFT_FLEET_HELPERS"
	// fleetConcurrencyEnv sets the rounds helper's gather concurrency (serve's --concurrency,
	// default 8), to tune it by measurement.
	fleetConcurrencyEnv = "CERTDRIFT_FLEET_CONCURRENCY"
)

var fleetSNIs = []string{"a.fleet.test", "b.fleet.test"}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// fleetReport is the part of `certdrift audit -o json` the fleet test reads.
type fleetReport struct {
	Summary struct {
		Envoys     int `json:"envoys"`
		Handshakes int `json:"handshakes"`
		Coverage   struct {
			HandshakesJudged int  `json:"handshakes_judged"`
			Handshakes       int  `json:"handshakes"`
			Gaps             int  `json:"gaps"`
			Complete         bool `json:"complete"`
		} `json:"coverage"`
	} `json:"summary"`
	Findings []struct {
		Code string `json:"code"`
	} `json:"findings"`
}

func TestFleetScale(t *testing.T) {
	pods, nodes, runs := envInt(fleetPodsEnv, 4), envInt(fleetNodesEnv, 1), envInt("CERTDRIFT_SCALE_RUNS", 1)
	// A long volume sync: 200 pods re-projecting their Secret every 2 s would load the node
	// agents (and the shared cores) during the measurement for nothing.
	tb := testbed.StartT(t, testbed.Options{Nodes: nodes, VolumeSyncDelay: 10 * time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	ca := certs.NewCA(t, certs.WithCommonName("certdrift fleet CA"))
	leaf := ca.Leaf(t, certs.WithDNSNames(fleetSNIs...))
	start := time.Now()
	deployFleet(ctx, t, tb, pods, leaf.CertPEM, leaf.KeyPEM, ca.CertPEM)
	ready, err := tb.WaitPodsReady(ctx, fleetNS, "app=fleet")
	if err != nil {
		t.Fatalf("fleet pods not ready: %v", err)
	}
	if len(ready) != pods {
		t.Fatalf("%d fleet pods ready, want %d", len(ready), pods)
	}
	t.Logf("%d Envoy pods on %d node agent(s) Ready after %s", pods, nodes, time.Since(start).Round(100*time.Millisecond))
	bins := namedPaths(t, fleetBinsEnv)
	if len(bins) == 0 {
		bins = []namedPath{{"certdrift", buildCertdrift(t)}}
	}

	modes := []string{"direct", "port-forward"}
	usage := map[string][]Usage{}
	for r := range runs {
		for _, mode := range modes { // interleaved: the machine's load drifts
			for _, b := range bins {
				u, rep, out := fleetAudit(ctx, t, b.path, tb.KubeconfigPath, mode)
				checkFleetReport(t, rep, pods, mode, out)
				key := b.name + " " + mode
				usage[key] = append(usage[key], u)
				t.Logf("run %d %-26s wall %.2fs cpu %.2fs (%.2f ms/pod) rss %.1f MB", r+1, key, u.Wall.Seconds(), u.CPU().Seconds(),
					u.CPU().Seconds()*1000/float64(pods), float64(u.MaxRSS)/(1<<20))
			}
		}
	}
	for _, mode := range modes {
		for _, b := range bins {
			us := usage[b.name+" "+mode]
			t.Logf("MEASURED audit %s %s, %d pods, %d runs: wall %s s, cpu %s s, rss %s MB", b.name, mode, pods, len(us),
				stat(us, func(u Usage) float64 { return u.Wall.Seconds() }, "%.2f"),
				stat(us, func(u Usage) float64 { return u.CPU().Seconds() }, "%.2f"),
				stat(us, func(u Usage) float64 { return float64(u.MaxRSS) / (1 << 20) }, "%.1f"))
		}
	}

	// serve-like rounds in one process (informers kept, transports and sessions kept), in a
	// child so that its CPU is certdrift's alone.
	helpers := namedPaths(t, fleetHelpersEnv)
	if len(helpers) == 0 {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		helpers = []namedPath{{"this", self}}
	}
	for _, mode := range modes {
		for _, h := range helpers {
			cmd := exec.CommandContext(ctx, h.path, "-test.run=^TestFleetRoundsHelper$", "-test.v")
			cmd.Env = append(os.Environ(), fleetHelperEnv+"="+tb.KubeconfigPath, "CERTDRIFT_FLEET_MODE="+mode,
				fmt.Sprintf("CERTDRIFT_FLEET_EXPECT=%d", pods))
			if p := os.Getenv(fleetProfileEnv); p != "" {
				cmd.Env = append(cmd.Env, fleetProfileEnv+"="+p+"."+h.name+"."+mode)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("rounds helper %s (%s): %v\n%s", h.name, mode, err, tail(string(out), 4000))
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "ROUND") || strings.Contains(line, "MEASURED") {
					t.Log(h.name + ": " + strings.TrimSpace(line))
				}
			}
		}
	}
}

type namedPath struct{ name, path string }

// namedPaths reads "name=path,name=path" from env (before/after binaries compared in one run).
func namedPaths(t *testing.T, env string) []namedPath {
	var out []namedPath
	for _, kv := range strings.Split(os.Getenv(env), ",") {
		if kv == "" {
			continue
		}
		name, path, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("%s: %q is not name=path", env, kv)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		out = append(out, namedPath{name, path})
	}
	return out
}

// TestFleetRoundsHelper is the child TestFleetScale starts: with CERTDRIFT_FLEET_HELPER set to a
// kubeconfig it runs rounds as `serve` does (one gather.Session, audit.Run per round) and prints
// each round's wall and CPU time (this process only). Without it, it checks that the rusage
// reading it relies on moves with work done.
func TestFleetRoundsHelper(t *testing.T) {
	kubeconfig := os.Getenv(fleetHelperEnv)
	if kubeconfig == "" {
		before := selfCPU()
		x := 0
		for i := range 50_000_000 {
			x += i % 7
		}
		if selfCPU() <= before || x == 0 {
			t.Fatalf("self CPU did not advance over a busy loop")
		}
		return
	}
	want := envInt("CERTDRIFT_FLEET_EXPECT", 1)
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	policy := config.DefaultPolicy
	mode := adminaccess.Mode(os.Getenv("CERTDRIFT_FLEET_MODE"))
	s, err := gather.Start(ctx, rc, policy, gather.KubeOptions{Namespaces: []string{fleetNS}, AdminMode: mode,
		Options: gather.Options{Concurrency: envInt(fleetConcurrencyEnv, 8), Timeout: policy.Timeout.D()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if p := os.Getenv(fleetProfileEnv); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	const rounds = 5
	var walls, cpus []float64
	for r := range rounds {
		c0, w0 := selfCPU(), time.Now()
		in := s.Gather(ctx, gather.Fleet)
		rep := audit.Run(in, policy, time.Now())
		wall, cpu := time.Since(w0), selfCPU()-c0
		if rep.Summary.Coverage.HandshakesJudged != 2*want || rep.Summary.Envoys != want {
			t.Fatalf("round %d (%s): %d envoys, %d of %d handshakes judged, want %d and %d", r+1, mode,
				rep.Summary.Envoys, rep.Summary.Coverage.HandshakesJudged, rep.Summary.Coverage.Handshakes, want, 2*want)
		}
		fmt.Printf("ROUND %d %s: %d pods, wall %.3fs, cpu %.3fs (%.2f ms/pod)\n", r+1, mode, want, wall.Seconds(), cpu.Seconds(),
			cpu.Seconds()*1000/float64(want))
		// Sessions are what makes port-forward rounds as cheap as direct ones: one per pod,
		// still open for the next round.
		if n := s.AdminSessions(); mode == adminaccess.PortForward && n != want {
			t.Errorf("round %d: %d port-forward sessions open after the round, want one per pod (%d)", r+1, n, want)
		}
		if r > 0 { // the first round opens every connection and session
			walls, cpus = append(walls, wall.Seconds()), append(cpus, cpu.Seconds())
		}
	}
	fmt.Printf("MEASURED serve-like rounds 2-%d %s, %d pods: wall %.3f–%.3f s, cpu %.3f–%.3f s\n", rounds, mode, want,
		minOf(walls), maxOf(walls), minOf(cpus), maxOf(cpus))
}

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fleetAudit(ctx context.Context, t *testing.T, bin, kubeconfig, mode string) (Usage, fleetReport, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, bin, "audit", "--kubeconfig", kubeconfig, "--namespace", fleetNS,
		"--admin-access", mode, "-o", "json")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Measure's peak RSS is the child's own (it starts the child through a small launcher), although
	// this process runs the node agents.
	u, err := Measure(cmd, 0, 1)
	if err != nil {
		t.Fatalf("certdrift audit (%s): %v\n%s", mode, err, tail(stderr.String(), 3000))
	}
	var rep fleetReport
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("certdrift audit (%s): report is not JSON: %v\n%s", mode, err, tail(stderr.String(), 3000))
	}
	return u, rep, stderr.String()
}

// checkFleetReport: every pod was read and both SNIs of every pod handshaken and judged; a
// fleet round that silently dropped pods would otherwise look fast.
func checkFleetReport(t *testing.T, rep fleetReport, pods int, mode, out string) {
	t.Helper()
	c := rep.Summary.Coverage
	if rep.Summary.Envoys != pods || c.Handshakes != 2*pods || c.HandshakesJudged != 2*pods || !c.Complete {
		t.Errorf("audit %s: %d envoys, %d of %d handshakes judged, complete %v (gaps %d), want %d envoys and %d handshakes\n%s",
			mode, rep.Summary.Envoys, c.HandshakesJudged, c.Handshakes, c.Complete, c.Gaps, pods, 2*pods, tail(out, 3000))
	}
}

// deployFleet creates the fleet: a CA-signed leaf for both SNIs in a kubernetes.io/tls Secret,
// an Envoy bootstrap with one filter chain per SNI (static tls_certificates from the volume),
// admin on the pod IP, and a Deployment of pods replicas.
func deployFleet(ctx context.Context, t *testing.T, tb *testbed.Testbed, pods int, certPEM, keyPEM, caPEM []byte) {
	t.Helper()
	c := tb.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", fleetNS, err)
	}
	for {
		if _, err := c.CoreV1().ServiceAccounts(fleetNS).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("namespace %s: no default ServiceAccount", fleetNS)
		case <-time.After(100 * time.Millisecond):
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fleet-tls", Namespace: fleetNS}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": caPEM}}
	if _, err := c.CoreV1().Secrets(fleetNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fleet-config", Namespace: fleetNS},
		Data: map[string]string{"envoy.yaml": fleetBootstrap()}}
	if _, err := c.CoreV1().ConfigMaps(fleetNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}
	labels := map[string]string{"app": "fleet"}
	replicas, grace := int32(pods), int64(2)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "fleet", Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0",
					Args:  []string{"-c", "/etc/envoy/envoy.yaml", "--log-level", "warn"},
					Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}, {Name: "admin", ContainerPort: 9901}},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/envoy", ReadOnly: true},
						{Name: "tls", MountPath: "/certs", ReadOnly: true}}}},
				Volumes: []corev1.Volume{
					{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "fleet-config"}}}},
					{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "fleet-tls"}}}},
			}}},
	}
	if _, err := c.AppsV1().Deployments(fleetNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
}

// fleetBootstrap: admin on the pod IP, one TLS listener with a filter chain per SNI, each a
// static context from the Secret volume (the shape the fleet figures were taken on).
func fleetBootstrap() string {
	var chains strings.Builder
	for _, sni := range fleetSNIs {
		fmt.Fprintf(&chains, `    - filter_chain_match: {server_names: [%q]}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates:
            - certificate_chain: {filename: /certs/tls.crt}
              private_key: {filename: /certs/tls.key}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: https
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: /}
                direct_response: {status: 200, body: {inline_string: fleet}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`, sni)
	}
	return `node: {id: fleet, cluster: fleet}
admin:
  address:
    socket_address: {address: 0.0.0.0, port_value: 9901}
static_resources:
  listeners:
  - name: https
    address:
      socket_address: {address: 0.0.0.0, port_value: 8443}
    listener_filters:
    - name: envoy.filters.listener.tls_inspector
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector
    filter_chains:
` + chains.String()
}
