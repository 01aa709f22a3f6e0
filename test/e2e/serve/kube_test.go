package serve

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
	"github.com/certdrift/certdrift/test/webtls"
)

const webHost = "web.example.com"

// deployScenario applies test/scenarios/<ns> as its README says (namespace, Secret web-tls, then
// the directory) and waits for its two Envoy pods.
func deployScenario(ctx context.Context, t *testing.T, tb *testbed.Testbed, ns string, leaf *certs.Leaf) []string {
	t.Helper()
	pods := webtls.Deploy(ctx, t, tb, ns, leaf)
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// TestServeKubernetes runs the exporter on the testbed: the static-tls scenario's pods go stale
// after a Secret rotation and get the finding, the plain-sds pods converge and are observed in
// the convergence histogram, the Secret's new desired fingerprint shows on /metrics within about
// a second of the update, and a deleted Secret's series disappear.
func TestServeKubernetes(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	ca := certs.NewCA(t, certs.WithCommonName("serve-kube-ca"))
	v1, v2 := map[string]*certs.Leaf{}, map[string]*certs.Leaf{}
	pods := map[string][]string{}
	for _, ns := range []string{"plain-sds", "static-tls"} {
		v1[ns] = ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost), certs.WithFreshKey())
		v2[ns] = ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost), certs.WithFreshKey())
		pods[ns] = deployScenario(ctx, t, tb, ns, v1[ns])
	}

	// A long interval: only the informers' early rounds can make the update latency short.
	x := startServe(t, "--kubeconfig", tb.KubeconfigPath, "--namespace", "plain-sds,static-tls",
		"--grace", "4s", "--interval", "3s", "--jitter", "0")
	prom := startPrometheus(t, x.Addr)
	waitFor(t, "all four pods converged on v1", 60*time.Second, func() (bool, string) {
		s := prom.query(t, `certdrift_bindings{state="converged"}`)
		return len(s) == 1 && s[0].Value == 4, fmt.Sprint(s, "\n", prom.query(t, `certdrift_finding`))
	})

	desiredFP := regexp.MustCompile(`certdrift_certificate_info\{[^}]*fingerprint_sha256="([0-9a-f]+)"[^}]*source="static-tls/web-tls"[^}]*view="desired"\}`)
	for ns := range pods {
		s, err := tb.Client.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get Secret %s/web-tls: %v", ns, err)
		}
		s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey] = v2[ns].ChainPEM(), v2[ns].KeyPEM
		if _, err := tb.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("rotate Secret %s/web-tls: %v", ns, err)
		}
	}
	updated := time.Now()
	want := pki.Fingerprint(v2["static-tls"].Cert)
	waitFor(t, "the rotated Secret's fingerprint on /metrics", 10*time.Second, func() (bool, string) {
		m := desiredFP.FindStringSubmatch(x.metrics(t))
		return m != nil && m[1] == want, fmt.Sprint(m)
	})
	latency := time.Since(updated)
	t.Logf("Secret update -> desired fingerprint on /metrics: %s", latency.Round(10*time.Millisecond))
	if latency > 3*time.Second {
		t.Errorf("Secret update took %s to show on /metrics; the debounced early round should make it about a second", latency)
	}

	waitFor(t, "stale findings for the static-tls pods", 90*time.Second, func() (bool, string) {
		return len(prom.query(t, `certdrift_finding{code="STALE_SERVED"}`)) == 2, fmt.Sprint(prom.query(t, `certdrift_finding`))
	})
	var stalePods []string
	for _, s := range prom.query(t, `certdrift_finding{code="STALE_SERVED"}`) {
		stalePods = append(stalePods, s.Metric["namespace"]+"/"+s.Metric["pod"])
	}
	sort.Strings(stalePods)
	var wantStale []string
	for _, p := range pods["static-tls"] {
		wantStale = append(wantStale, "static-tls/"+p)
	}
	if diff := cmp.Diff(wantStale, stalePods); diff != "" {
		t.Errorf("pods with STALE_SERVED (-want +got):\n%s", diff)
	}
	for _, s := range prom.query(t, `certdrift_finding`) {
		if s.Metric["namespace"] != "static-tls" {
			t.Errorf("unexpected finding outside static-tls: %v", s.Metric)
		}
	}
	waitFor(t, "the convergence histogram to observe both plain-sds pods", 30*time.Second, func() (bool, string) {
		s := prom.query(t, `certdrift_rotation_convergence_seconds_count`)
		return len(s) == 1 && s[0].Value >= 2, fmt.Sprint(s)
	})
	if s := prom.query(t, `certdrift_drift_age_seconds`); len(s) != 2 || !slices.ContainsFunc(s, func(x sample) bool { return x.Metric["workload"] != "" }) {
		t.Errorf("drift age: %v, want the two static-tls pods with their workload", s)
	}

	if err := tb.Client.CoreV1().Secrets("static-tls").Delete(ctx, "web-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Secret static-tls/web-tls: %v", err)
	}
	waitFor(t, "the deleted Secret's desired series to disappear", 20*time.Second, func() (bool, string) {
		body := x.metrics(t)
		return !strings.Contains(body, `source="static-tls/web-tls",view="desired"`), ""
	})
	if strings.Contains(x.Logs.String(), "PRIVATE KEY") {
		t.Error("certdrift logged key material")
	}
}
