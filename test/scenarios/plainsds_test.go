package scenarios

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/shardcheck"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// webHost is the name on the plain-sds and static-tls certificates.
const webHost = "web.example.com"

// tlsSecret is a cert-manager-style kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt).
func tlsSecret(ns, name string, leaf *certs.Leaf) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       leaf.CertPEM,
			corev1.TLSPrivateKeyKey: leaf.KeyPEM,
			"ca.crt":                leaf.Issuer.Root().CertPEM,
		},
	}
}

// updateSecretData replaces some keys of a Secret, as cert-manager does on renewal.
func updateSecretData(ctx context.Context, t *testing.T, ns, name string, data map[string][]byte) {
	t.Helper()
	s, err := tb.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Secret %s/%s: %v", ns, name, err)
	}
	for k, v := range data {
		s.Data[k] = v
	}
	if _, err := tb.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update Secret %s/%s: %v", ns, name, err)
	}
}

// checkServes fails unless every pod serves want on port for sni.
func checkServes(t *testing.T, pods []corev1.Pod, port int, sni string, want *x509.Certificate) {
	t.Helper()
	for _, p := range pods {
		if err := servesErr(tlsGet(hostPort(p.Status.PodIP, port), sni, nil), want); err != nil {
			t.Errorf("pod %s (%s) SNI %s: %v", p.Name, p.Status.PodIP, sni, err)
		}
	}
}

// waitVolumeFile waits until a pod's projected volume holds want under key: the node agent has
// synced the rotated Secret into the pod, so whatever Envoy serves next is Envoy's doing.
func waitVolumeFile(ctx context.Context, t *testing.T, p corev1.Pod, volume, key string, want []byte) {
	t.Helper()
	dir, err := tb.PodDir(p.Namespace, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, fmt.Sprintf("pod %s volume %s/%s updated", p.Name, volume, key), func() error {
		got, err := os.ReadFile(filepath.Join(dir, "volumes", volume, key))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s not yet the rotated content", key)
		}
		return nil
	})
}

// TestPlainSDS: two Envoy replicas serve a kubernetes.io/tls Secret through file-based SDS
// watching the mount directory; after the Secret is rotated both replicas serve the new
// certificate within a few seconds of the volume sync (seed 000).
func TestPlainSDS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "plain-sds"
	ca := certs.NewCA(t)
	v1 := ca.Leaf(t, certs.WithDNSNames(webHost))
	v2 := ca.Leaf(t, certs.WithDNSNames(webHost))

	bringUp(ctx, t, "plain-sds", tlsSecret(ns, "web-tls", v1))
	pods := waitReady(ctx, t, ns, "app=envoy", 2)
	checkServes(t, pods, 8443, webHost, v1.Cert)

	t.Run("AdminOnPodIP", func(t *testing.T) {
		for _, p := range pods {
			status, body, err := plainGet(hostPort(p.Status.PodIP, 9901), "/ready")
			if err != nil || status != 200 || !strings.Contains(body, "LIVE") {
				t.Errorf("admin /ready on pod %s IP %s: %d %q %v, want 200 LIVE", p.Name, p.Status.PodIP, status, body, err)
			}
		}
	})

	rotated := time.Now()
	updateSecretData(ctx, t, ns, "web-tls", map[string][]byte{"tls.crt": v2.CertPEM, "tls.key": v2.KeyPEM})
	for _, p := range pods {
		poll(ctx, t, "pod "+p.Name+" serving the rotated certificate", func() error {
			return servesErr(tlsGet(hostPort(p.Status.PodIP, 8443), webHost, nil), v2.Cert)
		})
		t.Logf("OBSERVED: pod %s serves the rotated certificate %s after the Secret update (sync delay %s)",
			p.Name, time.Since(rotated).Round(10*time.Millisecond), syncDelay)
	}
	checkServes(t, pods, 8443, webHost, v2.Cert)

	// certdrift: both pods converged by themselves, so a clean audit — even with no grace.
	if code, r := runAudit(t, ns, "--grace", "1ms"); code != 0 || len(r.Findings) != 0 {
		t.Errorf("audit after an SDS rotation: exit %d with findings %v, want 0 and none", code, r.findings())
	}
}

// TestStaticTLS: the same Deployment with a static tls_certificates context. After rotation the
// volumes update but no replica serves the new certificate; deleting one pod makes its
// replacement serve it while the other replica keeps the old one (seed 000, "restart fixes it").
func TestStaticTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "static-tls"
	ca := certs.NewCA(t)
	v1 := ca.Leaf(t, certs.WithDNSNames(webHost))
	v2 := ca.Leaf(t, certs.WithDNSNames(webHost))

	bringUp(ctx, t, "static-tls", tlsSecret(ns, "web-tls", v1))
	pods := waitReady(ctx, t, ns, "app=envoy", 2)
	checkServes(t, pods, 8443, webHost, v1.Cert)

	rotated := time.Now()
	updateSecretData(ctx, t, ns, "web-tls", map[string][]byte{"tls.crt": v2.CertPEM, "tls.key": v2.KeyPEM})
	for _, p := range pods {
		waitVolumeFile(ctx, t, p, "tls", "tls.crt", v2.CertPEM)
	}
	t.Logf("OBSERVED: both volumes hold the rotated certificate %s after the Secret update", time.Since(rotated).Round(10*time.Millisecond))
	// Well past any file watch: SDS pods converge about 0.1 s after their volume sync.
	time.Sleep(2 * time.Second)
	checkServes(t, pods, 8443, webHost, v1.Cert)

	// certdrift: both replicas stale (loaded and served), nothing else.
	code, r := runAudit(t, ns, "--grace", "1s")
	var want []string
	for _, p := range pods {
		want = append(want, "STALE_LOADED warning "+ns+"/"+p.Name, "STALE_SERVED warning "+ns+"/"+p.Name)
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, r.findings()); diff != "" || code != 1 {
		t.Errorf("audit after the rotation: exit %d (want 1), findings (-want +got):\n%s", code, diff)
	}
	// Split over replicas, the pods and their Secret (one namespace) land in different shards at
	// some count: the replicas together say the same.
	shardcheck.Agree(t, certdriftBinary(t), tb.KubeconfigPath, "--namespace", ns, "--grace", "1s")

	victim, survivor := pods[0], pods[1]
	deleted := time.Now()
	if err := tb.Client.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", victim.Name, err)
	}
	var replacement corev1.Pod
	poll(ctx, t, "a Ready replacement for "+victim.Name, func() error {
		now, err := tb.WaitPodsReady(ctx, ns, "app=envoy")
		if err != nil {
			return err
		}
		for _, p := range now {
			if p.Name == victim.Name {
				return fmt.Errorf("%s still listed", victim.Name)
			}
			if p.Name != survivor.Name {
				replacement = p
			}
		}
		if replacement.Name == "" {
			return fmt.Errorf("no replacement among %d pods", len(now))
		}
		return nil
	})
	t.Logf("OBSERVED: replacement %s Ready %s after deleting %s", replacement.Name, time.Since(deleted).Round(10*time.Millisecond), victim.Name)
	checkServes(t, []corev1.Pod{replacement}, 8443, webHost, v2.Cert)
	checkServes(t, []corev1.Pod{survivor}, 8443, webHost, v1.Cert)

	// certdrift: the survivor is stale and, now that a sibling serves the new leaf, divergent;
	// the replacement is clean.
	code, r = runAudit(t, ns, "--grace", "1s")
	want = []string{"REPLICA_DIVERGENCE warning " + ns + "/" + survivor.Name,
		"STALE_LOADED warning " + ns + "/" + survivor.Name, "STALE_SERVED warning " + ns + "/" + survivor.Name}
	if diff := cmp.Diff(want, r.findings()); diff != "" || code != 1 {
		t.Errorf("audit after replacing one replica: exit %d (want 1), findings (-want +got):\n%s", code, diff)
	}
	for _, f := range r.Findings {
		if f.Code == "REPLICA_DIVERGENCE" && (f.Subject.Workload != "Deployment/envoy" || f.Evidence["replicas_serving_expected"] != "1") {
			t.Errorf("REPLICA_DIVERGENCE %+v: want workload Deployment/envoy and 1 replica serving the expected leaf", f)
		}
	}
}
