package scenarios

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/test/scenarios/eg-mtls/certgen"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	egNS  = "eg-mtls"
	cpSNI = "envoy-gateway.eg-mtls.svc.cluster.local"
	// Envoy TLS stats counting rejected peer certificates (unknown CA is a verify error).
	xdsClusterVerifyFailed = "cluster.xds_cluster.ssl.fail_verify_error"
	listenerVerifyFailed   = "listener.*_18000.ssl.fail_verify_error"
)

// certgenSecret is one certgen Secret as read back: its leaf (with key, to act as that client)
// and its ca.crt.
type certgenSecret struct {
	certPEM []byte
	leaf    *x509.Certificate
	keyPair tls.Certificate
	cas     []*x509.Certificate
}

func readCertgenSecret(ctx context.Context, t *testing.T, name string) certgenSecret {
	t.Helper()
	s, err := tb.Client.CoreV1().Secrets(egNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Secret %s/%s: %v", egNS, name, err)
	}
	kp, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatalf("Secret %s/%s: tls.crt/tls.key do not form a key pair: %v", egNS, name, err)
	}
	return certgenSecret{
		certPEM: s.Data["tls.crt"],
		leaf:    firstCert(t, name+" tls.crt", s.Data["tls.crt"]),
		keyPair: kp,
		cas:     parseCerts(t, name+" ca.crt", s.Data["ca.crt"]),
	}
}

// rotation runs the rotate command in-process with -step: it returns after the first Secret
// (the proxy's, envoy) is written, with a function that lets it write the rest and waits.
func rotation(ctx context.Context, t *testing.T, bundle bool) (next func()) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errs strings.Builder
	done := make(chan int, 1)
	go func() {
		code := certgen.Main([]string{"-kubeconfig", tb.KubeconfigPath, "-namespace", egNS,
			"-bundle=" + strconv.FormatBool(bundle), "-step"}, inR, outW, &errs)
		outW.Close()
		done <- code
	}()
	lines := bufio.NewScanner(outR)
	readUntil := func(prefix string) {
		for lines.Scan() {
			t.Logf("rotate: %s", lines.Text())
			if strings.HasPrefix(lines.Text(), prefix) {
				return
			}
		}
		t.Fatalf("rotate ended before %q (exit %d): %s", prefix, <-done, errs.String())
	}
	readUntil("press Enter")
	return func() {
		for i := 0; i < len(certgen.Targets)-1; i++ {
			if _, err := io.WriteString(inW, "\n"); err != nil {
				t.Fatalf("rotate stdin: %v", err)
			}
			if i < len(certgen.Targets)-2 {
				readUntil("press Enter")
			}
		}
		go io.Copy(io.Discard, outR)
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("rotate exited %d: %s", code, errs.String())
			}
		case <-ctx.Done():
			t.Fatalf("rotate did not finish: %v", ctx.Err())
		}
	}
}

// proxyGet sends GET path through the proxy's plain-HTTP listener.
func proxyGet(proxy corev1.Pod, path string) (int, string) {
	status, body, err := plainGet(hostPort(proxy.Status.PodIP, 10080), path)
	if err != nil {
		return 0, err.Error()
	}
	return status, body
}

// accepted reports whether a peer let a client presenting cert complete a request.
func accepted(addr, sni string, cert tls.Certificate) (bool, exchange) {
	ex := tlsGet(addr, sni, &cert)
	return ex.err == nil && ex.status == 200, ex
}

// TestEGMTLS: an Envoy Gateway-like control plane and proxy authenticate each other with
// certgen Secrets (the rate limit is the real one's, in TestEGCARotation). The rotate command swaps the CA the way
// `certgen --overwrite` does, once without and once with the [newCA, oldCA] bundle, writing the
// proxy's Secret first and pausing, which opens the window where the proxy has the new leaf and
// trust while the control plane still has the old ones (seed 003).
func TestEGMTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	namespaces, rest := split(loadManifests(t, "eg-mtls"))
	applyObjects(ctx, t, namespaces...)
	if code := certgen.Main([]string{"-kubeconfig", tb.KubeconfigPath, "-namespace", egNS}, strings.NewReader(""), io.Discard, io.Discard); code != 0 {
		t.Fatalf("rotate (first run, creating the Secrets) exited %d", code)
	}
	cpSvc := startServiceProxy(ctx, t, egNS, "envoy-gateway", 18000)
	for _, o := range rest {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == "envoy-config" {
			pointAtServiceProxy(t, cm, cpSNI, 18000, cpSvc.addr)
		}
	}
	applyObjects(ctx, t, rest...)
	cp := waitReady(ctx, t, egNS, "app=envoy-gateway", 1)[0]
	proxy := waitReady(ctx, t, egNS, "app=envoy", 1)[0]
	cpAddr := hostPort(cp.Status.PodIP, 18000)

	// Every pod serves its Secret; the proxy's requests pass both mTLS handshakes.
	px, cps := readCertgenSecret(ctx, t, "envoy"), readCertgenSecret(ctx, t, "envoy-gateway")
	if err := servesErr(tlsGet(cpAddr, cpSNI, &px.keyPair), cps.leaf); err != nil {
		t.Errorf("control plane: %v", err)
	}
	if status, body := proxyGet(proxy, "/"); status != 200 {
		t.Fatalf("GET / through the proxy before any rotation: %d %q, want 200", status, body)
	}
	// certdrift, told that the proxy and the control plane authenticate each other: clean.
	if code, r := runAudit(t, egNS, "--config", egPairings(t)); code != 0 || len(r.Findings) != 0 {
		t.Errorf("audit before any rotation: exit %d with findings %v, want 0 and none", code, r.findings())
	}

	t.Run("ProxyAdminLocalhostOnly", func(t *testing.T) {
		if conn, err := net.DialTimeout("tcp", hostPort(proxy.Status.PodIP, 19000), time.Second); err == nil {
			conn.Close()
			t.Errorf("proxy admin answers on the pod IP; it is configured on 127.0.0.1:19000")
		}
		if status, body, err := podGet(ctx, egNS, proxy.Name, 19000, "/ready"); err != nil || status != 200 || !strings.Contains(body, "LIVE") {
			t.Errorf("proxy admin /ready through DialPod: %d %q %v", status, body, err)
		}
	})

	for _, bundle := range []bool{false, true} {
		name := map[bool]string{false: "WithoutBundle", true: "WithBundle"}[bundle]
		if !t.Run(name, func(t *testing.T) { egRound(ctx, t, bundle, cp, proxy) }) {
			t.FailNow() // the round did not get to a converged state for the next one to start from
		}
	}
}

// egPairings is the Kubernetes-mode config that declares the mTLS pair: the proxy's bundle must
// accept the control plane's leaf and the other way round.
func egPairings(t *testing.T) string {
	return writeConfig(t, `pairings:
- name: xds
  bundle: {source: eg-mtls/envoy}
  leaf: {source: eg-mtls/envoy-gateway}
  mutual: true
`)
}

// gapDirections lists the CA_BUNDLE_GAP findings with their severity: live ones as "trusting
// pod <- presenting pod", desired ones (the Secrets themselves) as "Secrets <- leaf source".
func gapDirections(r auditReport, pods map[string]string) []string {
	var out []string
	for _, f := range r.Findings {
		switch {
		case f.Code != "CA_BUNDLE_GAP":
		case f.Subject.Envoy == "":
			out = append(out, f.Severity+" Secrets <- "+f.Subject.Source)
		default:
			out = append(out, f.Severity+" "+pods[f.Subject.Envoy]+" <- "+pods[f.Evidence["leaf_presented_by"]])
		}
	}
	slices.Sort(out)
	return out
}

// pointAtServiceProxy replaces the Service address host:port in the proxy's bootstrap with the
// test's stand-in for kube-proxy (see serviceProxy).
func pointAtServiceProxy(t *testing.T, cm *corev1.ConfigMap, host string, port int, to *net.TCPAddr) {
	t.Helper()
	from := fmt.Sprintf("{address: %s, port_value: %d}", host, port)
	if !strings.Contains(cm.Data["envoy.yaml"], from) {
		t.Fatalf("ConfigMap %s: envoy.yaml has no %s", cm.Name, from)
	}
	cm.Data["envoy.yaml"] = strings.ReplaceAll(cm.Data["envoy.yaml"], from, fmt.Sprintf("{address: %s, port_value: %d}", to.IP, to.Port))
}

// egRound is one certgen rotation (bundle or not) from a converged state; it returns the rate
// limit's replacement pod.
func egRound(ctx context.Context, t *testing.T, bundle bool, cp, proxy corev1.Pod) {
	cpAddr := hostPort(cp.Status.PodIP, 18000)
	oldPx := readCertgenSecret(ctx, t, "envoy")
	oldCA := oldPx.cas[0]
	start := time.Now()

	next := rotation(ctx, t, bundle) // the proxy's Secret is written, the others wait
	newPx := readCertgenSecret(ctx, t, "envoy")
	checkCAs(t, "envoy", newPx.cas, oldCA, bundle)
	poll(ctx, t, "the proxy loading its new leaf and CA (admin /certs)", func() error {
		status, body, err := podGet(ctx, egNS, proxy.Name, 19000, "/certs")
		if err != nil || status != 200 {
			return fmt.Errorf("GET /certs: %d %v", status, err)
		}
		b := strings.ToLower(body)
		for _, want := range []*x509.Certificate{newPx.leaf, newPx.cas[0]} {
			if !strings.Contains(b, want.SerialNumber.Text(16)) {
				return fmt.Errorf("serial %s not loaded yet", want.SerialNumber.Text(16))
			}
		}
		if strings.Contains(b, oldPx.leaf.SerialNumber.Text(16)) {
			return fmt.Errorf("old leaf %s still loaded", oldPx.leaf.SerialNumber.Text(16))
		}
		return nil
	})
	t.Logf("OBSERVED: proxy loaded its new leaf and CA %s after the rotation started", time.Since(start).Round(10*time.Millisecond))

	// The window: the proxy has the new leaf and trust, the control plane the old ones. Which
	// side refused the handshake shows in the Envoys' TLS stats: the proxy's cluster counts a
	// server certificate it rejected, the control plane's listener a client certificate.
	proxyRejects, cpRejects := stat(ctx, t, proxy, 19000, xdsClusterVerifyFailed), stat(ctx, t, cp, 19001, listenerVerifyFailed)
	status, body := proxyGet(proxy, "/")
	proxyRejects, cpRejects = stat(ctx, t, proxy, 19000, xdsClusterVerifyFailed)-proxyRejects, stat(ctx, t, cp, 19001, listenerVerifyFailed)-cpRejects
	t.Logf("OBSERVED: window: GET / through the proxy: %d %q; proxy rejected the control plane's certificate %d time(s), control plane rejected the proxy's %d time(s)",
		status, strings.TrimSpace(body), proxyRejects, cpRejects)
	if status == 200 {
		t.Errorf("mTLS proxy -> control plane works in the window; the control plane still trusts only the old CA and must reject the new proxy leaf")
	}
	if bundle && (proxyRejects != 0 || cpRejects == 0) {
		t.Errorf("with the bundle the proxy must accept the control plane's old leaf (its bundle holds the old CA) and the control plane must reject the new proxy leaf; rejections: proxy %d, control plane %d", proxyRejects, cpRejects)
	}
	if !bundle && proxyRejects == 0 {
		t.Errorf("without the bundle the proxy (trusting only the new CA) must reject the control plane's old leaf; it did not")
	}
	if ok, ex := accepted(cpAddr, cpSNI, newPx.keyPair); ok {
		t.Errorf("the control plane accepted the new proxy leaf before its Secret was rotated (%d)", ex.status)
	}
	if ok, ex := accepted(cpAddr, cpSNI, oldPx.keyPair); !ok {
		t.Errorf("the control plane rejected the old proxy leaf before its Secret was rotated: %v", ex.err)
	}

	// certdrift in the window: the Secrets disagree (the proxy's is rotated, the control
	// plane's not yet), and so do the pods: the live trust of each side against what the other
	// presents. Within the grace period the gaps are warnings.
	names := map[string]string{egNS + "/" + proxy.Name: "proxy", egNS + "/" + cp.Name: "control-plane"}
	_, r := runAudit(t, egNS, "--config", egPairings(t), "--grace", "10m")
	want := []string{"warning Secrets <- eg-mtls/envoy", "warning Secrets <- eg-mtls/envoy-gateway",
		"warning control-plane <- proxy", "warning proxy <- control-plane"}
	if bundle {
		// The proxy's [newCA, oldCA] accepts the control plane's old leaf; the control plane
		// (still [oldCA]) rejects the proxy's new one: the bundle fixes one direction only.
		want = []string{"warning Secrets <- eg-mtls/envoy", "warning control-plane <- proxy"}
	}
	if diff := cmp.Diff(want, gapDirections(r, names)); diff != "" {
		t.Errorf("audit in the window (bundle %v): CA_BUNDLE_GAP (-want +got):\n%s", bundle, diff)
	}

	next() // envoy-gateway, then envoy-rate-limit
	newCP, newRL := readCertgenSecret(ctx, t, "envoy-gateway"), readCertgenSecret(ctx, t, "envoy-rate-limit")
	checkCAs(t, "envoy-gateway", newCP.cas, oldCA, bundle)
	checkCAs(t, "envoy-rate-limit", newRL.cas, oldCA, bundle)
	if !newCP.cas[0].Equal(newPx.cas[0]) || !newRL.cas[0].Equal(newPx.cas[0]) {
		t.Errorf("the three Secrets do not share one new CA")
	}
	poll(ctx, t, "the control plane serving its new leaf", func() error {
		return servesErr(tlsGet(cpAddr, cpSNI, &newPx.keyPair), newCP.leaf)
	})
	poll(ctx, t, "GET / through the proxy working again", func() error {
		if status, body := proxyGet(proxy, "/"); status != 200 {
			return fmt.Errorf("%d %q", status, body)
		}
		return nil
	})
	t.Logf("OBSERVED: control plane converged, proxy -> control plane mTLS works again %s after the rotation started",
		time.Since(start).Round(10*time.Millisecond))
	// What the bundle does fix: a converged peer still accepts a peer that has not converged.
	if ok, ex := accepted(cpAddr, cpSNI, oldPx.keyPair); ok != bundle {
		t.Errorf("converged control plane accepts a not-yet-converged proxy's old leaf: %v (err %v), want %v (bundle %v)", ok, ex.err, bundle, bundle)
	}

	// Converged: certdrift finds nothing (the rate limit's STALE_PROCESS and repair are the real
	// one's, in eg-ca-rotation).
	if code, r := runAudit(t, egNS, "--config", egPairings(t), "--grace", "1s"); code != 0 || len(r.Findings) != 0 {
		t.Errorf("audit after the rotation converged: exit %d with findings %v, want 0 and none", code, r.findings())
	}
}

// checkCAs checks a rotated ca.crt: a new CA first, then the old one only with the bundle.
func checkCAs(t *testing.T, secret string, cas []*x509.Certificate, oldCA *x509.Certificate, bundle bool) {
	t.Helper()
	switch {
	case cas[0].Equal(oldCA):
		t.Errorf("Secret %s ca.crt starts with the old CA", secret)
	case bundle && (len(cas) != 2 || !cas[1].Equal(oldCA)):
		t.Errorf("Secret %s ca.crt has %d CAs, want [newCA, oldCA]", secret, len(cas))
	case !bundle && len(cas) != 1:
		t.Errorf("Secret %s ca.crt has %d CAs, want [newCA]", secret, len(cas))
	}
}

// stat sums the Envoy admin counters matching pattern (a name, "*" matching anything within it)
// on pod p's admin port, reached from inside the pod.
func stat(ctx context.Context, t *testing.T, p corev1.Pod, port int, pattern string) int {
	t.Helper()
	status, body, err := podGet(ctx, p.Namespace, p.Name, port, "/stats")
	if err != nil || status != 200 {
		t.Fatalf("pod %s admin /stats: %d %v", p.Name, status, err)
	}
	prefix, suffix, wild := strings.Cut(pattern, "*")
	sum, found := 0, false
	for _, line := range strings.Split(body, "\n") {
		name, value, ok := strings.Cut(line, ": ")
		if !ok || !strings.HasPrefix(name, prefix) || (wild && !strings.HasSuffix(name, suffix)) || (!wild && name != pattern) {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil {
			t.Fatalf("pod %s stat %s: %q is not a counter", p.Name, name, value)
		}
		sum, found = sum+n, true
	}
	if !found {
		t.Fatalf("pod %s admin /stats has no %s", p.Name, pattern)
	}
	return sum
}
