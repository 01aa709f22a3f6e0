package inventory

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/certs"
)

// TestFetch reads, by name, the sources pods mount that the informers do not watch: an Opaque
// Secret holding only ca.crt becomes a CA-only source, a ConfigMap bundle a bundle source; a
// Secret without certificates, a ConfigMap without PEM, a missing Secret, a Secret of a watched
// type (the informers' label selector left it out on purpose) and a namespace out of scope give
// nothing; a Secret that may not be read is a summary with an error, never an absence.
func TestFetch(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	ns, other := kubetest.UniqueNS(t, "fetch"), kubetest.UniqueNS(t, "fetch-out")
	kubetest.CreateNamespaces(t, admin, ns, other)
	ca := certs.NewCA(t, certs.WithCommonName("Fetch CA"))
	leaf := ca.Leaf(t, certs.WithDNSNames("web.example"))
	kubetest.CreateSecret(t, admin, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-ca"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"ca.crt": ca.CertPEM}})
	kubetest.CreateSecret(t, admin, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "password"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"password": []byte("hunter2")}})
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(ns, "web-tls", leaf.CertPEM, leaf.KeyPEM, ca.CertPEM))
	kubetest.CreateSecret(t, admin, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "web-ca"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"ca.crt": ca.CertPEM}})
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bundle"}, Data: map[string]string{"root.pem": string(ca.CertPEM)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "envoy-config"}, Data: map[string]string{"envoy.yaml": "admin: {}\n"}},
	} {
		if _, err := admin.CoreV1().ConfigMaps(cm.Namespace).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create configmap: %v", err)
		}
	}
	refs := []ref.Source{{Kind: "Secret", Namespace: ns, Name: "web-ca"}, {Kind: "Secret", Namespace: ns, Name: "password"}, {Kind: "Secret", Namespace: ns, Name: "web-tls"}, {Kind: "Secret", Namespace: ns, Name: "gone"},
		{Kind: "ConfigMap", Namespace: ns, Name: "bundle"}, {Kind: "ConfigMap", Namespace: ns, Name: "envoy-config"}, {Kind: "Secret", Namespace: other, Name: "web-ca"}, {Kind: "Secret", Namespace: ns, Name: "web-ca"}}

	inv, err := New(tb.Config, Options{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	snap := inv.Fetch(context.Background(), refs)
	var got []string
	for _, s := range snap.Secrets {
		if s.Err != nil {
			t.Errorf("secret %s: %v", s.Key(), s.Err)
		}
		for _, it := range s.Items {
			got = append(got, "secret "+s.Key()+" cert="+it.CertKey+" ca="+it.CAKey)
		}
	}
	for _, c := range snap.ConfigMaps {
		for _, b := range c.Bundles {
			got = append(got, "configmap "+c.Key()+" key="+b.Key)
		}
	}
	want := []string{"secret " + ns + "/web-ca cert= ca=ca.crt", "configmap " + ns + "/bundle key=root.pem"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fetched: -want +got:\n%s", diff)
	}
	obs := snap.Observations()
	if len(obs) != 2 || len(obs[0].Items) != 1 || len(obs[0].Items[0].CA) != 1 || obs[0].Items[0].ChainErr != nil || obs[0].ChangedAt.IsZero() {
		t.Errorf("CA-only observation %+v: want one item with the CA, no chain error, a change time", obs)
	}

	// A user without RBAC: the Secret is a gap with an error that says what was refused.
	rc, err := tb.ClientConfig("fetch-nobody")
	if err != nil {
		t.Fatal(err)
	}
	denied, err := New(rc, Options{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	snap = denied.Fetch(context.Background(), refs[:1])
	if len(snap.Secrets) != 1 || snap.Secrets[0].Err == nil || !strings.Contains(snap.Secrets[0].Err.Error(), "web-ca") {
		t.Errorf("fetch without RBAC: %+v, want one Secret with an error naming it", snap.Secrets)
	}
}
