package scenarios

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/shardcheck"
)

// TestCopiedCert: an Envoy serves a copy of its certificate kept in a ConfigMap, while the Secret
// of the same name in its namespace was renewed. No mount or SDS name ties the pod to the Secret;
// only the certificate's names do (an inferred binding, audit/bind rule 6). The audit must find
// the Envoy stale against the Secret rather than call it clean, and so must a sharded serve whose
// replica for the pod does not own the Secret: it judges every Secret of its pods' namespaces.
func TestCopiedCert(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "copied-cert"
	ca := certs.NewCA(t)
	copied := ca.Leaf(t, certs.WithDNSNames(webHost))
	renewed := ca.Leaf(t, certs.WithDNSNames(webHost))

	namespaces, rest := split(loadManifests(t, "copied-cert"))
	applyObjects(ctx, t, namespaces...)
	applyObjects(ctx, t, tlsSecret(ns, "web-tls", renewed), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-copy"},
		Data:       map[string]string{"tls.crt": string(copied.CertPEM), "tls.key": string(copied.KeyPEM)},
	})
	applyObjects(ctx, t, rest...)
	pods := waitReady(ctx, t, ns, "app=envoy", 1)
	checkServes(t, pods, 8443, webHost, copied.Cert)

	// Stale against web-tls, bound by the leaf's names; and the copy, read as a bundle because a
	// pod mounts it, is a leaf where a CA belongs.
	code, r := runAudit(t, ns, "--grace", "1s")
	p := ns + "/" + pods[0].Name
	want := []string{"CA_BUNDLE_HYGIENE warning ", "STALE_LOADED warning " + p, "STALE_SERVED warning " + p}
	if diff := cmp.Diff(want, r.findings()); diff != "" || code != 1 {
		t.Errorf("audit of an Envoy serving an old copy of web-tls: exit %d (want 1), findings (-want +got):\n%s", code, diff)
	}
	shardcheck.Agree(t, certdriftBinary(t), tb.KubeconfigPath, "--namespace", ns, "--grace", "1s")
}
