// Package webtls deploys the scenarios of test/scenarios that serve one kubernetes.io/tls Secret
// named web-tls (plain-sds, static-tls: two Envoy replicas each) onto a testbed, as their READMEs
// say — namespace, Secret, then the directory — for the tests that audit, export and repair them.
package webtls

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
	"github.com/certdrift/certdrift/test/testbed"
)

// SecretName is the Secret every web-tls scenario mounts.
const SecretName = "web-tls"

// Secret is the scenario's Secret in ns holding leaf (its chain, key, and root as ca.crt).
func Secret(ns string, leaf *certs.Leaf) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       leaf.ChainPEM(),
			corev1.TLSPrivateKeyKey: leaf.KeyPEM,
			"ca.crt":                leaf.Issuer.Root().CertPEM,
		},
	}
}

// Deploy applies scenario ns (its directory under test/scenarios) serving leaf and returns its
// two Ready Envoy pods.
func Deploy(ctx context.Context, t testing.TB, tb *testbed.Testbed, ns string, leaf *certs.Leaf) []corev1.Pod {
	t.Helper()
	root, err := envoytest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "test", "scenarios", ns)
	if out, err := tb.Kubectl(ctx, "apply", "-f", filepath.Join(dir, "00-namespace.yaml")); err != nil {
		t.Fatalf("apply namespace %s: %v\n%s", ns, err, out)
	}
	if _, err := tb.Client.CoreV1().Secrets(ns).Create(ctx, Secret(ns, leaf), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret %s/%s: %v", ns, SecretName, err)
	}
	if out, err := tb.Kubectl(ctx, "apply", "-f", dir); err != nil {
		t.Fatalf("apply scenario %s: %v\n%s", ns, err, out)
	}
	pods, err := tb.WaitPodsReady(ctx, ns, "app=envoy")
	if err != nil {
		t.Fatalf("scenario %s: pods not ready: %v", ns, err)
	}
	if len(pods) != 2 {
		t.Fatalf("scenario %s: %d pods ready, want 2", ns, len(pods))
	}
	return pods
}
