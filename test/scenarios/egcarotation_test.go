package scenarios

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/test/testbed"
)

const egcaNS = "eg-ca-rotation"

// certgenPair is one of certgen's TLS Secrets as read back: its leaf (with key, to act as that
// component in a handshake) and the CAs of its ca.crt.
type certgenPair struct {
	certPEM []byte
	leaf    *x509.Certificate
	keyPair tls.Certificate
	cas     []*x509.Certificate
}

func readCertgen(ctx context.Context, t *testing.T, name string) certgenPair {
	t.Helper()
	s, err := tb.Client.CoreV1().Secrets(testbed.EnvoyGatewayNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Secret %s/%s: %v", testbed.EnvoyGatewayNamespace, name, err)
	}
	kp, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatalf("Secret %s/%s: tls.crt/tls.key do not form a key pair: %v", testbed.EnvoyGatewayNamespace, name, err)
	}
	return certgenPair{certPEM: s.Data[corev1.TLSCertKey], leaf: firstCert(t, name+" tls.crt", s.Data[corev1.TLSCertKey]), keyPair: kp,
		cas: parseCerts(t, name+" ca.crt", s.Data["ca.crt"])}
}

// h2Handshake makes a TLS 1.3 handshake over conn as a gRPC client would (ALPN h2, client
// certificate client, SNI sni) and reports the leaf the server sent and whether it accepted the
// client: with TLS 1.3 a rejected client certificate shows only on the first read, so the HTTP/2
// preface is sent and the server's first frame read.
func h2Handshake(conn net.Conn, sni string, client tls.Certificate) (*x509.Certificate, error) {
	defer conn.Close()
	var leaf *x509.Certificate
	tc := tls.Client(conn, &tls.Config{
		ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"h2"},
		Certificates: []tls.Certificate{client},
		VerifyPeerCertificate: func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
			if len(rawCerts) > 0 {
				leaf, _ = x509.ParseCertificate(rawCerts[0])
			}
			return nil // the leaf is compared by the caller
		},
	})
	_ = tc.SetDeadline(time.Now().Add(dialTimeout))
	if err := tc.Handshake(); err != nil {
		return leaf, err
	}
	if _, err := tc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		return leaf, err
	}
	if _, err := tc.Read(make([]byte, 9)); err != nil {
		return leaf, err
	}
	return leaf, nil
}

// xdsHandshake is h2Handshake with the control plane's xDS port, as a proxy connects.
func xdsHandshake(ctx context.Context, eg *testbed.EnvoyGateway, client tls.Certificate) (*x509.Certificate, error) {
	conn, err := eg.Dial(ctx, 18000)
	if err != nil {
		return nil, err
	}
	return h2Handshake(conn, "envoy-gateway", client)
}

// rlHandshake is h2Handshake with a rate limit pod's gRPC port, as a proxy calls it.
func rlHandshake(rl corev1.Pod, client tls.Certificate) (*x509.Certificate, error) {
	conn, err := net.DialTimeout("tcp", hostPort(rl.Status.PodIP, 8081), dialTimeout)
	if err != nil {
		return nil, err
	}
	return h2Handshake(conn, "envoy-ratelimit.envoy-gateway-system.svc.cluster.local", client)
}

// adminStats reads a pod's Envoy admin /stats (localhost-only: through DialPod) into counters
// and gauges by name.
func adminStats(ctx context.Context, t *testing.T, p corev1.Pod, port int) map[string]int {
	t.Helper()
	status, body, err := podGet(ctx, p.Namespace, p.Name, port, "/stats")
	if err != nil || status != 200 {
		t.Fatalf("pod %s admin /stats: %d %v", p.Name, status, err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(body, "\n") {
		name, value, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(value)); err == nil {
			out[name] = n
		}
	}
	return out
}

var serialRE = regexp.MustCompile(`"serial_number": "([0-9a-fA-F]+)"`)

// adminSerials lists the serial numbers in a pod's Envoy admin /certs (leaves and CAs alike).
func adminSerials(ctx context.Context, t *testing.T, p corev1.Pod, port int) []string {
	t.Helper()
	status, body, err := podGet(ctx, p.Namespace, p.Name, port, "/certs")
	if err != nil || status != 200 {
		t.Fatalf("pod %s admin /certs: %d %v", p.Name, status, err)
	}
	var out []string
	for _, m := range serialRE.FindAllStringSubmatch(body, -1) {
		n, _ := new(big.Int).SetString(m[1], 16)
		out = append(out, n.String())
	}
	return out
}

func xdsStats(s map[string]int) string {
	var parts []string
	for _, k := range []string{"control_plane.connected_state", "cluster.xds_cluster.upstream_cx_total",
		"cluster.xds_cluster.upstream_cx_connect_fail", "cluster.xds_cluster.ssl.handshake",
		"cluster.xds_cluster.ssl.fail_verify_error", "cluster.xds_cluster.ssl.connection_error"} {
		parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(k, "cluster.xds_cluster."), s[k]))
	}
	return strings.Join(parts, " ")
}

func rlStats(s map[string]int) string {
	var parts []string
	for _, k := range []string{"cluster.ratelimit_cluster.upstream_cx_total", "cluster.ratelimit_cluster.upstream_rq_200",
		"cluster.ratelimit_cluster.ssl.handshake", "cluster.ratelimit_cluster.ssl.fail_verify_error",
		"cluster.ratelimit_cluster.ssl.connection_error", "cluster.ratelimit_cluster.upstream_cx_connect_fail"} {
		parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(k, "cluster.ratelimit_cluster."), s[k]))
	}
	return strings.Join(parts, " ")
}

// egcaPairings declares who must trust whom among certgen's Secrets: the proxy (Secret envoy)
// and the rate limit (envoy-rate-limit) both ways, and the proxy and the control plane
// (envoy-gateway) both ways.
func egcaPairings(t *testing.T) string {
	ns := testbed.EnvoyGatewayNamespace
	return writeConfig(t, `pairings:
- name: proxy-ratelimit
  bundle: {source: `+ns+`/envoy}
  leaf: {source: `+ns+`/envoy-rate-limit}
  mutual: true
- name: proxy-control-plane
  bundle: {source: `+ns+`/envoy}
  leaf: {source: `+ns+`/envoy-gateway}
  mutual: true
`)
}

// TestEGCARotation: `envoy-gateway certgen --overwrite`, the real one, replaces the CA and every
// leaf of the real control plane's Secrets. What happens between the real control plane, the real
// proxy and the real rate limit service, phase by phase, and what certdrift says in each.
func TestEGCARotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	redis, err := tb.StartRedis(ctx, testbed.EnvoyGatewayNamespace, "redis")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { redis.Stop() })
	t.Logf("%s at %s", redis.Version, redis.Service)
	eg := testbed.StartEnvoyGatewayT(t, tb, testbed.EnvoyGatewayOptions{RateLimitRedisURL: redis.Service})
	for _, f := range []string{"00-namespace.yaml", "gateway.yaml"} {
		if out, err := tb.Kubectl(ctx, "apply", "-f", filepath.Join(egcaNS, f)); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	egNS := testbed.EnvoyGatewayNamespace
	selector := "gateway.envoyproxy.io/owning-gateway-namespace=" + egcaNS + ",gateway.envoyproxy.io/owning-gateway-name=web"
	const rlSelector = "app.kubernetes.io/name=envoy-ratelimit"
	p := waitReady(ctx, t, egNS, selector, 1)[0]
	rl := waitReady(ctx, t, egNS, rlSelector, 1)[0]
	poll(ctx, t, "proxy connected to the control plane", func() error {
		if s := adminStats(ctx, t, p, 19000); s["control_plane.connected_state"] != 1 {
			return fmt.Errorf("%s", xdsStats(s))
		}
		return nil
	})
	get := func() (int, string) {
		status, body, err := plainGet(hostPort(p.Status.PodIP, 8080), "/")
		if err != nil {
			return 0, err.Error()
		}
		return status, strings.TrimSpace(body)
	}
	old := map[string]certgenPair{}
	for _, n := range []string{"envoy-gateway", "envoy", "envoy-rate-limit"} {
		old[n] = readCertgen(ctx, t, n)
	}
	ns := egNS + "," + egcaNS
	observe := func(phase string) auditReport {
		s := adminStats(ctx, t, p, 19000)
		status, body := get()
		s2 := adminStats(ctx, t, p, 19000)
		t.Logf("OBSERVED [%s] proxy %s xDS: %s", phase, p.Name, xdsStats(s2))
		t.Logf("OBSERVED [%s] GET / through the proxy: %d %q; rate limit cluster before %s / after %s", phase, status, body, rlStats(s), rlStats(s2))
		t.Logf("OBSERVED [%s] proxy /certs serials: %v", phase, adminSerials(ctx, t, p, 19000))
		for _, n := range []string{"envoy", "envoy-gateway", "envoy-rate-limit"} {
			cur := readCertgen(ctx, t, n)
			t.Logf("OBSERVED [%s] Secret %s: leaf %s CA %s (first: leaf %s CA %s)", phase, n, cur.leaf.SerialNumber, cur.cas[0].SerialNumber, old[n].leaf.SerialNumber, old[n].cas[0].SerialNumber)
		}
		for _, who := range []string{"first", "current"} {
			c := old["envoy"].keyPair
			if who == "current" {
				c = readCertgen(ctx, t, "envoy").keyPair
			}
			leaf, err := xdsHandshake(ctx, eg, c)
			t.Logf("OBSERVED [%s] control plane, client with the %s envoy leaf: served %s, err %v", phase, who, serial(leaf), err)
			leaf, err = rlHandshake(rl, c)
			t.Logf("OBSERVED [%s] rate limit %s, client with the %s envoy leaf: served %s, err %v", phase, rl.Name, who, serial(leaf), err)
		}
		_, r := runAudit(t, ns, "--config", egcaPairings(t), "--grace", "1ms")
		for _, b := range r.Bindings {
			t.Logf("OBSERVED [%s]   binding %s %s trust=%v -> %q %s origin %s", phase, b.Envoy, b.Source, b.Trust, b.Secret, b.State, b.Origin)
		}
		return r
	}
	observe("before")

	eg.HoldCerts()
	if err := tb.EnvoyGatewayCertgen(ctx, "", "--overwrite"); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	cur := map[string]certgenPair{}
	for _, n := range []string{"envoy-gateway", "envoy", "envoy-rate-limit"} {
		cur[n] = readCertgen(ctx, t, n)
	}
	waitVolumeFile(ctx, t, p, "certs", "tls.crt", cur["envoy"].certPEM)
	poll(ctx, t, "the proxy's admin /certs showing the new envoy leaf", func() error {
		if !slices.Contains(adminSerials(ctx, t, p, 19000), cur["envoy"].leaf.SerialNumber.String()) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	t.Logf("OBSERVED proxy loaded the new envoy leaf %s after certgen", time.Since(at).Round(10*time.Millisecond))
	observe("window: control plane held")

	// A proxy that connects in the window: delete the pod, its replacement starts with the new
	// Secret and meets a control plane still on the old one.
	if err := tb.Client.CoreV1().Pods(egNS).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	oldName := p.Name
	poll(ctx, t, "a replacement proxy running", func() error {
		pods, err := tb.Client.CoreV1().Pods(egNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		for _, q := range pods.Items {
			if q.Name != oldName && q.Status.Phase == corev1.PodRunning && q.Status.PodIP != "" && q.DeletionTimestamp == nil {
				if _, _, err := podGet(ctx, q.Namespace, q.Name, 19000, "/ready"); err == nil {
					p = q
					return nil
				}
			}
		}
		return fmt.Errorf("not yet")
	})
	time.Sleep(3 * time.Second)
	observe("window: new proxy, control plane held")

	if err := eg.ReleaseCerts(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	poll(ctx, t, "the new proxy connected once the control plane has the new Secret", func() error {
		if s := adminStats(ctx, t, p, 19000); s["control_plane.connected_state"] != 1 {
			return fmt.Errorf("%s", xdsStats(s))
		}
		return nil
	})
	t.Logf("OBSERVED new proxy connected %s after the control plane's /certs was released", time.Since(released).Round(10*time.Millisecond))
	observe("control plane converged")

	code, r := runAudit(t, ns, "--config", egcaPairings(t), "--grace", "1ms", "--reload", "--yes", "--reload-cooldown", "1s")
	t.Logf("OBSERVED reload: exit %d %+v", code, r.Reload)
	poll(ctx, t, "the rate limit's replacement Ready", func() error {
		pods, err := tb.WaitPodsReady(ctx, egNS, rlSelector)
		if err != nil {
			return err
		}
		if len(pods) != 1 || pods[0].Name == rl.Name {
			return fmt.Errorf("%d pods, old pod %s still there", len(pods), rl.Name)
		}
		rl = pods[0]
		return nil
	})
	time.Sleep(2 * time.Second)
	observe("rate limit restarted")
}
