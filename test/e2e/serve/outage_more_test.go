package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
	"github.com/certdrift/certdrift/test/testbed"
)

// proxiedKubeconfig is the testbed's admin kubeconfig with its server behind an apiProxy: the
// API server's certificate names 127.0.0.1, so only the port changes.
func proxiedKubeconfig(t *testing.T, tb *testbed.Testbed) (*apiProxy, string) {
	t.Helper()
	kc, err := os.ReadFile(tb.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	serverRE := regexp.MustCompile(`server: https://(127\.0\.0\.1:\d+)`)
	m := serverRE.FindSubmatch(kc)
	if m == nil {
		t.Fatalf("no loopback server in the testbed kubeconfig %s", tb.KubeconfigPath)
	}
	proxy := newAPIProxy(t, string(m[1]))
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, serverRE.ReplaceAll(kc, []byte("server: https://"+proxy.addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	return proxy, path
}

// stall cuts the proxy and listens again on its address accepting connections that never get an
// answer: an API server that is partitioned away rather than down, the case that hangs a client
// without deadlines. cut ends it.
func (p *apiProxy) stall() error {
	p.cut()
	return p.listen(p.addr, func(c net.Conn) []net.Conn { return []net.Conn{c} })
}

// metricValue is the value of one exact series line of a text exposition.
func metricValue(body, series string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// sumFamily is the sum of every series of one metric family (0 when it has none).
func sumFamily(body, name string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(?:\{[^}]*\})? (\S+)$`)
	total := 0.0
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		total += v
	}
	return total
}

// TestServeRemediateAPIOutage: two `serve --remediate` replicas reach the API server through a
// proxy that is cut for longer than the Lease's renew deadline, right after a rotation of the
// static-tls Secret, so that the rounds of the outage find the pods stale. While the API server
// is unreachable: source_up{kubernetes} is 0 on both, no repair is counted by either, no pod is
// evicted and no Event is written, and the leader stops leading once no renew succeeded for the
// renew deadline (elect.go) while nobody else can take the Lease. After the proxy is restored,
// with no restart: source_up is 1 again, a replica holds the Lease, and the stale pods are
// repaired, by a leader whose Kubernetes source is up again (its informers relist with backoff,
// so the Lease can be back seconds before the cache is). There is no leader metric: the Lease
// and the replicas' logs say who leads.
func TestServeRemediateAPIOutage(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ca := certs.NewCA(t, certs.WithCommonName("serve-remediate-outage-ca"))
	leaf := func() *certs.Leaf {
		return ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost), certs.WithFreshKey())
	}
	v1, v2 := leaf(), leaf()
	deployScenario(ctx, t, tb, "static-tls", v1)
	proxy, proxied := proxiedKubeconfig(t, tb)

	// Lease 15s: renew deadline 10s, retry ≈2s (cmd/certdrift serve.go's enableRepair). Grace 4s: the rounds of
	// the outage find the pods stale while the leader still leads; acting on them would be
	// acting on the cache from before the cut.
	replica := func(name string) *exporter {
		return startServe(t, "--kubeconfig", proxied, "--namespace", "static-tls", "--interval", "1s", "--jitter", "0",
			"--admin-access", "direct", "--timeout", "2s", "--grace", "4s",
			"--remediate", "--remediate-lease-namespace", "default", "--remediate-budget", "5",
			"--remediate-lease-duration", "15s", "--remediate-identity", name)
	}
	replicas := map[string]*exporter{"replica-a": replica("replica-a"), "replica-b": replica("replica-b")}
	holder := func() (string, time.Time) {
		l, err := tb.Client.CoordinationV1().Leases("default").Get(ctx, "certdrift-remediate", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			return "", time.Time{}
		}
		return *l.Spec.HolderIdentity, l.Spec.RenewTime.Time
	}
	waitFor(t, "both replicas up, converged on v1, and a leader", 60*time.Second, func() (bool, string) {
		for _, x := range replicas {
			body := x.metrics(t)
			if v, ok := metricValue(body, `certdrift_bindings{state="converged"}`); !ok || v != 2 {
				return false, grep(body, "certdrift_bindings")
			}
		}
		h, _ := holder()
		return replicas[h] != nil, "lease holder " + h
	})
	leaderName, _ := holder()
	leader := replicas[leaderName]

	// Rotate through the real API server and cut as soon as both replicas have seen it.
	s, err := tb.Client.CoreV1().Secrets("static-tls").Get(ctx, "web-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey] = v2.ChainPEM(), v2.KeyPEM
	if _, err := tb.Client.CoreV1().Secrets("static-tls").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	desired := regexp.MustCompile(`certdrift_certificate_info\{[^}]*fingerprint_sha256="` + pki.Fingerprint(v2.Cert) + `"[^}]*view="desired"`)
	waitFor(t, "both replicas to see the rotated Secret", 20*time.Second, func() (bool, string) {
		for _, x := range replicas {
			if !desired.MatchString(x.metrics(t)) {
				return false, ""
			}
		}
		return true, ""
	})
	pods, err := tb.Client.CoreV1().Pods("static-tls").List(ctx, metav1.ListOptions{LabelSelector: "app=envoy"})
	if err != nil {
		t.Fatal(err)
	}
	podUIDs := map[string]string{}
	for _, p := range pods.Items {
		podUIDs[p.Name] = string(p.UID)
	}
	actionsBefore := map[string]float64{}
	for n, x := range replicas {
		actionsBefore[n] = sumFamily(x.metrics(t), "certdrift_reload_actions_total")
	}
	logAt := map[string]int{}
	for n, x := range replicas {
		logAt[n] = len(x.Logs.String())
	}
	leaderLogAt := logAt[leaderName]
	proxy.cut()
	cutAt := time.Now()

	waitFor(t, "source_up{kubernetes} 0 on both replicas", 30*time.Second, func() (bool, string) {
		for _, x := range replicas {
			if v, ok := metricValue(x.metrics(t), `certdrift_source_up{source="kubernetes"}`); !ok || v != 0 {
				return false, ""
			}
		}
		return true, ""
	})
	sourceDown := time.Since(cutAt)
	waitFor(t, "the outage's rounds to find the pods stale", 30*time.Second, func() (bool, string) {
		body := leader.metrics(t)
		return strings.Count(body, `certdrift_finding{code="STALE_SERVED"`) == 2, grep(body, "certdrift_finding")
	})
	staleAt := time.Since(cutAt)
	// The leader must give up within the renew deadline (10s) of its last renew, which was at
	// most a retry period (≈2s) before the cut.
	waitFor(t, "the leader to stop leading", 20*time.Second, func() (bool, string) {
		return strings.Contains(leader.Logs.String()[leaderLogAt:], `msg="remediate: not leading"`), ""
	})
	steppedDown := time.Since(cutAt)
	if steppedDown > 13*time.Second {
		t.Errorf("the leader stopped leading %s after the cut; the renew deadline is 10s", steppedDown)
	}
	// Hold the outage past a whole Lease duration: nobody may lead or act without the API server.
	time.Sleep(max(0, 17*time.Second-time.Since(cutAt)))
	// The stale rounds came while the leader still led, but with the Kubernetes source down it
	// must not even try: its desired view is the cache from before the cut.
	if staleAt >= steppedDown {
		t.Errorf("the pods were found stale (%s) only after the leader stepped down (%s): the test proves nothing about refraining", staleAt, steppedDown)
	}
	if strings.Contains(leader.Logs.String()[leaderLogAt:], "remediate: read the stale pods") {
		t.Errorf("the leader tried to repair from a round judged with the Kubernetes source down")
	}
	for n, x := range replicas {
		body := x.metrics(t)
		if got := sumFamily(body, "certdrift_reload_actions_total"); got != actionsBefore[n] {
			t.Errorf("%s counted repair actions during the outage: %v → %v\n%s", n, actionsBefore[n], got, grep(body, "reload_actions"))
		}
		if v, _ := metricValue(body, `certdrift_source_up{source="kubernetes"}`); v != 0 {
			t.Errorf("%s: source_up{kubernetes} = %v during the outage", n, v)
		}
		if strings.Contains(x.Logs.String()[logAt[n]:], `msg="remediate: leading"`) {
			t.Errorf("%s took the lead during the outage", n)
		}
	}
	if h, renewed := holder(); h != leaderName || renewed.After(cutAt) {
		t.Errorf("the Lease during the outage: holder %q renewed %s, want %s's, untouched since the cut", h, renewed, leaderName)
	}
	now, err := tb.Client.CoreV1().Pods("static-tls").List(ctx, metav1.ListOptions{LabelSelector: "app=envoy"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range now.Items {
		if podUIDs[p.Name] != string(p.UID) {
			t.Errorf("pod %s changed during the outage (evicted?)", p.Name)
		}
	}
	if len(now.Items) != len(podUIDs) {
		t.Errorf("%d pods during the outage, %d before", len(now.Items), len(podUIDs))
	}
	if n := certdriftEvents(ctx, t, tb, "static-tls"); n != 0 {
		t.Errorf("%d certdrift Events written during the outage", n)
	}

	if err := proxy.start(proxy.addr); err != nil {
		t.Fatalf("restore the API server proxy on %s: %v", proxy.addr, err)
	}
	restored := time.Now()
	// One poll, so that each recovery is timed on its own.
	var sourceUp, leading, repaired time.Duration
	upAt := map[string]time.Duration{}
	var newLeader string
	waitFor(t, "source_up 1 on both replicas, a Lease holder and a repair after the restore", 120*time.Second, func() (bool, string) {
		since := time.Since(restored)
		for n, x := range replicas {
			if _, ok := upAt[n]; !ok {
				if v, ok := metricValue(x.metrics(t), `certdrift_source_up{source="kubernetes"}`); ok && v == 1 {
					upAt[n] = since
				}
			}
		}
		if sourceUp == 0 && len(upAt) == len(replicas) {
			sourceUp = since
		}
		if leading == 0 {
			if h, renewed := holder(); replicas[h] != nil && renewed.After(restored) {
				newLeader, leading = h, since
			}
		}
		if repaired == 0 && newLeader != "" {
			if v, _ := metricValue(replicas[newLeader].metrics(t), `certdrift_reload_actions_total{outcome="done",strategy="evict"}`); v >= 1 {
				repaired = since
				if up, ok := upAt[newLeader]; !ok || up > repaired {
					t.Errorf("%s repaired (seen at %s) before its Kubernetes source was up again (%v)", newLeader, repaired, upAt[newLeader])
				}
			}
		}
		return sourceUp > 0 && leading > 0 && repaired > 0, fmt.Sprintf("source_up %v, leader %q at %s, repaired at %s", upAt, newLeader, leading, repaired)
	})
	t.Logf("OBSERVED leader %s; after the cut: source_up 0 at %s, STALE_SERVED at %s, stopped leading at %s; after restore: source_up 1 at %v, %s holds the Lease at %s, first eviction done at %s",
		leaderName, sourceDown.Round(100*time.Millisecond), staleAt.Round(100*time.Millisecond), steppedDown.Round(100*time.Millisecond),
		upAt, newLeader, leading.Round(100*time.Millisecond), repaired.Round(100*time.Millisecond))
}

// certdriftEvents counts the Events certdrift wrote in namespace.
func certdriftEvents(ctx context.Context, t *testing.T, tb *testbed.Testbed, namespace string) int {
	t.Helper()
	events, err := tb.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events.Items {
		if strings.HasPrefix(e.Reason, "Certdrift") {
			n++
		}
	}
	return n
}

// TestAuditKubernetesAPIOutage: `certdrift audit` against an API server that refuses
// connections, or accepts them and never answers, ends within its sync timeout with exit 2 and
// an error naming the API server, with no report; once the API server is back the same command
// gives the normal report.
func TestAuditKubernetesAPIOutage(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ca := certs.NewCA(t, certs.WithCommonName("audit-outage-ca"))
	deployScenario(ctx, t, tb, "plain-sds", ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost)))
	proxy, proxied := proxiedKubeconfig(t, tb)
	const syncTimeout = 10 * time.Second
	audit := func() (cdbin.Result, time.Duration) {
		t.Helper()
		// The context is the hang detector: certdrift must end well before it.
		rctx, rcancel := context.WithTimeout(ctx, syncTimeout+30*time.Second)
		defer rcancel()
		start := time.Now()
		r, err := cdbin.Run(rctx, certdriftBin, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()},
			"audit", "--kubeconfig", proxied, "--namespace", "plain-sds", "--admin-access", "direct",
			"--timeout", "2s", "--sync-timeout", syncTimeout.String(), "-o", "json")
		if err != nil {
			t.Fatalf("certdrift audit did not end within %s: %v\n%s", syncTimeout+30*time.Second, err, r.Output())
		}
		return r, time.Since(start)
	}
	clean := func(what string) time.Duration {
		t.Helper()
		r, took := audit()
		var rep struct {
			Findings []json.RawMessage `json:"findings"`
			Summary  struct {
				Coverage struct {
					Complete bool `json:"complete"`
				} `json:"coverage"`
			} `json:"summary"`
		}
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &rep) != nil || len(rep.Findings) != 0 || !rep.Summary.Coverage.Complete {
			t.Fatalf("%s: exit %d, want 0 and a complete report with no findings\n%s", what, r.Code, r.Output())
		}
		return took
	}
	before := clean("with the API server up")

	apiHost := proxy.addr
	outage := func(what string) time.Duration {
		t.Helper()
		r, took := audit()
		if r.Code != 2 {
			t.Errorf("%s: exit %d, want 2 (could not run)\n%s", what, r.Code, r.Output())
		}
		if strings.TrimSpace(r.Stdout) != "" {
			t.Errorf("%s: printed a report on stdout:\n%s", what, r.Stdout)
		}
		// The error itself, not only the log lines before it (gone at --log.level=error).
		_, errText, _ := strings.Cut(r.Stderr, "certdrift: error:")
		if errText == "" || !strings.Contains(errText, apiHost) {
			t.Errorf("%s: no error naming the API server %s:\n%s", what, apiHost, r.Stderr)
		}
		if took > syncTimeout+5*time.Second {
			t.Errorf("%s: took %s, beyond the sync timeout %s", what, took, syncTimeout)
		}
		t.Logf("OBSERVED %s: exit %d after %s:%s", what, r.Code, took.Round(100*time.Millisecond), errText)
		return took
	}
	proxy.cut()
	refused := outage("API server refusing connections")
	if err := proxy.stall(); err != nil {
		t.Fatal(err)
	}
	stalled := outage("API server accepting connections and never answering")
	proxy.cut()
	if err := proxy.start(proxy.addr); err != nil {
		t.Fatalf("restore the API server proxy on %s: %v", proxy.addr, err)
	}
	after := clean("after the API server is back")
	t.Logf("OBSERVED audit: up %s exit 0; refused %s exit 2; stalled %s exit 2; restored %s exit 0",
		before.Round(100*time.Millisecond), refused.Round(100*time.Millisecond), stalled.Round(100*time.Millisecond), after.Round(100*time.Millisecond))
}

// fixedPortsEnvoy is a file-SDS Envoy whose admin and listener ports are given, so that a
// replacement can take the place of a stopped one.
func fixedPortsEnvoy(t *testing.T, dir string, adminPort, listenerPort int) *envoytest.Envoy {
	t.Helper()
	sdsPath := filepath.Join(t.TempDir(), "sds.json")
	if err := envoytest.WriteSDSFile(sdsPath, envoytest.TLSSecret("web_cert",
		filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), dir)); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	b := envoytest.Bootstrap(envoytest.Listener{Port: listenerPort,
		Chains: []envoytest.Chain{{SDS: &envoytest.SDSRef{Name: "web_cert", Path: sdsPath, WatchedDir: dir}}}})
	if err := json.Unmarshal([]byte(b), &doc); err != nil {
		t.Fatal(err)
	}
	doc["admin"] = map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": adminPort}}}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return envoytest.Start(t, envoytest.Config{Bootstrap: string(out)})
}

// TestServeEnvoyRestartMidRound: local mode, two Envoys, rounds every 300ms. One Envoy is killed
// (SIGKILL, whatever it was answering) and a new one started on the same admin and listener
// ports. While it is gone the rounds report it unreachable (admin_up 0 and an UNREACHABLE
// finding) and the other Envoy's series stay as they were; once the new one is up the next
// rounds judge it converged again, with the same certdrift process.
func TestServeEnvoyRestartMidRound(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("serve-envoy-restart-ca"))
	web := secretDir(t, "web")
	project(t, web, ca, ca.Leaf(t, certs.WithCommonName("v1"), certs.WithDNSNames(host), certs.WithFreshKey()))
	adminPort, err := envoytest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	listenerPort, err := envoytest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	flaky := fixedPortsEnvoy(t, web, adminPort, listenerPort)
	steady := startSDS(t, web)

	cfgPath := filepath.Join(t.TempDir(), "certdrift.yaml")
	body := fmt.Sprintf("desired:\n  - name: web\n    dir: %s\nenvoys:%s%s\npolicy:\n  grace: 1s\n  timeout: 1s\n",
		web, envoyEntry(t, "flaky", flaky), envoyEntry(t, "steady", steady))
	if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	x := startServe(t, "--config", cfgPath, "--interval", "300ms", "--jitter", "0")
	up := func(body, envoy string) (float64, bool) {
		return metricValue(body, `certdrift_envoy_admin_up{envoy="`+envoy+`"}`)
	}
	steadySeries := func(body string) []string {
		var out []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "certdrift_certificate_") && strings.Contains(l, `envoy="steady"`) {
				out = append(out, l)
			}
		}
		return out
	}
	waitFor(t, "both Envoys converged", 30*time.Second, func() (bool, string) {
		body := x.metrics(t)
		v, _ := metricValue(body, `certdrift_bindings{state="converged"}`)
		return v == 2, grep(body, "certdrift_bindings")
	})
	steadyBefore := steadySeries(x.metrics(t))
	if len(steadyBefore) == 0 {
		t.Fatal("no certificate series for the steady Envoy")
	}
	rounds := func() float64 { v, _ := metricValue(x.metrics(t), "certdrift_rounds_total"); return v }

	flaky.Kill()
	killed := time.Now()
	var during string
	waitFor(t, "the killed Envoy reported unreachable", 20*time.Second, func() (bool, string) {
		during = x.metrics(t)
		v, ok := up(during, "flaky")
		return ok && v == 0 && strings.Contains(during, `code="UNREACHABLE"`), grep(during, "flaky")
	})
	gone := time.Since(killed)
	if v, _ := up(during, "steady"); v != 1 {
		t.Errorf("the steady Envoy's admin_up = %v while the other was gone", v)
	}
	steadyDuring := steadySeries(during)
	if strings.Join(steadyDuring, "\n") != strings.Join(steadyBefore, "\n") {
		t.Errorf("the steady Envoy's series changed while the other was gone:\nbefore:\n%s\nduring:\n%s",
			strings.Join(steadyBefore, "\n"), strings.Join(steadyDuring, "\n"))
	}
	if !strings.Contains(during, `certdrift_finding{`) || !regexp.MustCompile(`certdrift_finding\{[^}]*code="UNREACHABLE"[^}]*envoy="flaky"`).MatchString(during) {
		t.Errorf("no UNREACHABLE finding for the killed Envoy:\n%s", grep(during, "certdrift_finding"))
	}
	if regexp.MustCompile(`certdrift_finding\{[^}]*envoy="steady"`).MatchString(during) {
		t.Errorf("a finding for the steady Envoy while the other was gone:\n%s", grep(during, "certdrift_finding"))
	}
	roundsGone := rounds()
	// Rounds go on while it is gone.
	waitFor(t, "rounds to go on while an Envoy is gone", 10*time.Second, func() (bool, string) {
		return rounds() >= roundsGone+3, ""
	})

	restarted := fixedPortsEnvoy(t, web, adminPort, listenerPort)
	if restarted.AdminURL != flaky.AdminURL {
		t.Fatalf("the new Envoy's admin is %s, want %s", restarted.AdminURL, flaky.AdminURL)
	}
	back := time.Now()
	waitFor(t, "the restarted Envoy judged converged again", 30*time.Second, func() (bool, string) {
		body := x.metrics(t)
		v, _ := up(body, "flaky")
		c, _ := metricValue(body, `certdrift_bindings{state="converged"}`)
		return v == 1 && c == 2 && !strings.Contains(body, `code="UNREACHABLE"`), grep(body, "flaky") + "\n" + grep(body, "certdrift_bindings")
	})
	recovered := time.Since(back)
	after := x.metrics(t)
	if v, _ := metricValue(after, "certdrift_coverage_complete"); v != 1 {
		t.Errorf("coverage incomplete after the restart:\n%s", grep(after, "coverage"))
	}
	if strings.Join(steadySeries(after), "\n") != strings.Join(steadyBefore, "\n") {
		t.Errorf("the steady Envoy's series changed across the restart:\n%s", strings.Join(steadySeries(after), "\n"))
	}
	if !regexp.MustCompile(`certdrift_certificate_info\{[^}]*envoy="flaky"[^}]*view="served"`).MatchString(after) {
		t.Errorf("no served series for the restarted Envoy:\n%s", grep(after, `envoy="flaky"`))
	}
	t.Logf("OBSERVED Envoy restart: UNREACHABLE %s after SIGKILL; converged %s after the new Envoy was ready; %v rounds in all",
		gone.Round(10*time.Millisecond), recovered.Round(10*time.Millisecond), rounds())
}
