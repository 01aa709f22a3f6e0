package scenarios

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/shardcheck"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMergedGateway: an ingress gateway mounts one merged Opaque Secret with <host>.crt/.key
// for two hosts and serves each by SNI; rotating only host b makes every replica serve the new
// b certificate while a stays as it was (seeds 002/004). Its admin is localhost-only.
func TestMergedGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, hostA, hostB = "merged-gateway", "a.example.com", "b.example.com"
	ca := certs.NewCA(t)
	a1 := ca.Leaf(t, certs.WithDNSNames(hostA))
	b1 := ca.Leaf(t, certs.WithDNSNames(hostB))
	b2 := ca.Leaf(t, certs.WithDNSNames(hostB))
	merged := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-ingressgateway-certs", Namespace: ns},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			hostA + ".crt": a1.CertPEM, hostA + ".key": a1.KeyPEM,
			hostB + ".crt": b1.CertPEM, hostB + ".key": b1.KeyPEM,
		},
	}

	bringUp(ctx, t, "merged-gateway", merged)
	pods := waitReady(ctx, t, ns, "app=istio-ingressgateway", 2)
	checkServes(t, pods, 8443, hostA, a1.Cert)
	checkServes(t, pods, 8443, hostB, b1.Cert)

	t.Run("UnknownSNIHasNoChain", func(t *testing.T) {
		for _, p := range pods {
			if ex := tlsGet(hostPort(p.Status.PodIP, 8443), "c.example.com", nil); ex.err == nil || ex.leaf != nil {
				t.Errorf("pod %s SNI c.example.com: served %s err %v; no filter chain matches, want the handshake refused",
					p.Name, serial(ex.leaf), ex.err)
			}
		}
	})

	t.Run("AdminLocalhostOnly", func(t *testing.T) {
		for _, p := range pods {
			if conn, err := net.DialTimeout("tcp", hostPort(p.Status.PodIP, 15000), time.Second); err == nil {
				conn.Close()
				t.Errorf("pod %s admin answers on the pod IP %s:15000; it is configured on 127.0.0.1", p.Name, p.Status.PodIP)
			}
			status, body, err := podGet(ctx, ns, p.Name, 15000, "/ready")
			if err != nil || status != 200 || !strings.Contains(body, "LIVE") {
				t.Errorf("pod %s admin /ready through DialPod: %d %q %v, want 200 LIVE", p.Name, status, body, err)
			}
		}
	})

	// certdrift reads the merged Opaque Secret with the layout flag (one item per host) and
	// binds each host's SDS secret on every replica: clean before the rotation.
	layout := []string{"--secret-layout", "cert=*.crt,key=*.key", "--grace", "1s"}
	code, r := runAudit(t, ns, layout...)
	if code != 0 || len(r.Findings) != 0 {
		t.Errorf("audit before the rotation: exit %d with findings %v, want 0 and none", code, r.findings())
	}
	checkMergedBindings(t, r, pods, merged.Name, hostA, hostB)
	// Split over shards, a replica whose pod does not own the merged Opaque Secret reads it by
	// name, with the layout, and the replicas together say what one serve does.
	shardcheck.Agree(t, certdriftBinary(t), tb.KubeconfigPath, append([]string{"--namespace", ns}, layout...)...)

	// Preflight names one item of the merged Secret as audit prints it (source/item): host b's
	// new leaf is served under b's SNI by both replicas, each reloading it by itself; the same
	// file named as host a's item is refused by a's clients.
	leafB := filepath.Join(t.TempDir(), "b2.pem")
	if err := os.WriteFile(leafB, b2.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	item, layoutOnly := ns+"/"+merged.Name+"/", layout[:2] // preflight has no --grace
	pcode, pr := runPreflight(t, ns, append([]string{"--leaf", item + hostB + "=" + leafB}, layoutOnly...)...)
	sniOK := 0
	for _, h := range pr.Handshakes {
		if h.Phase == audit.PhaseNewLeafSNI && h.Result == audit.HandshakeAccepts && strings.HasSuffix(h.Verifier, "SNI "+hostB) {
			sniOK++
		}
	}
	if pcode != 0 || pr.Verdict != audit.PreflightSafe || len(pr.Candidates) != 1 || pr.Candidates[0].Item != hostB || sniOK != len(pods) {
		t.Errorf("preflight of %s%s: exit %d, verdict %s, candidates %+v, %d accepting %s handshakes; want 0, safe, item %s, %d",
			item, hostB, pcode, pr.Verdict, pr.Candidates, sniOK, hostB, hostB, len(pods))
	}
	if pcode, pr = runPreflight(t, ns, append([]string{"--leaf", item + hostA + "=" + leafB}, layoutOnly...)...); pcode != 1 || pr.Verdict != audit.PreflightBreaks {
		t.Errorf("control, host b's leaf as item %s: exit %d, verdict %s; want 1, breaks (a's clients refuse it)", hostA, pcode, pr.Verdict)
	}

	rotated := time.Now()
	updateSecretData(ctx, t, ns, merged.Name, map[string][]byte{hostB + ".crt": b2.CertPEM, hostB + ".key": b2.KeyPEM})
	for _, p := range pods {
		poll(ctx, t, "pod "+p.Name+" serving the rotated "+hostB, func() error {
			return servesErr(tlsGet(hostPort(p.Status.PodIP, 8443), hostB, nil), b2.Cert)
		})
		t.Logf("OBSERVED: pod %s serves the rotated %s %s after the Secret update", p.Name, hostB, time.Since(rotated).Round(10*time.Millisecond))
	}
	// Host a's SDS resource was re-read too (same watched directory), but its files did not
	// change: it must still serve the same certificate.
	time.Sleep(time.Second)
	checkServes(t, pods, 8443, hostA, a1.Cert)
	checkServes(t, pods, 8443, hostB, b2.Cert)

	// Every replica reloaded host b by itself: still clean, past the grace period.
	time.Sleep(time.Until(rotated.Add(2 * time.Second)))
	code, r = runAudit(t, ns, layout...)
	if code != 0 || len(r.Findings) != 0 {
		t.Errorf("audit after rotating host b: exit %d with findings %v, want 0 and none", code, r.findings())
	}
	checkMergedBindings(t, r, pods, merged.Name, hostA, hostB)
}

// checkMergedBindings fails unless every pod has a converged binding to each host's item of the
// merged Secret.
func checkMergedBindings(t *testing.T, r auditReport, pods []corev1.Pod, secret string, hosts ...string) {
	t.Helper()
	for _, p := range pods {
		for _, h := range hosts {
			found := false
			for _, b := range r.Bindings {
				if b.Envoy == p.Namespace+"/"+p.Name && b.Source == p.Namespace+"/"+secret && b.Item == h {
					found = true
					if b.State != "converged" {
						t.Errorf("pod %s item %s: binding %s (origin %s), want converged", p.Name, h, b.State, b.Origin)
					}
				}
			}
			if !found {
				t.Errorf("pod %s: no binding to %s item %s in %+v", p.Name, secret, h, r.Bindings)
			}
		}
	}
}
