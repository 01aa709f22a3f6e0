package inventory

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
	"github.com/certdrift/certdrift/test/certs"
)

// secretFacts is what TestInventoryMatchesCertificates compares per Secret.
type secretFacts struct {
	Key        string
	Type       string
	ChangedHow kube.ChangedHow
	ChangedBy  string
	Items      []itemFacts
}

func TestInventoryMatchesCertificates(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	nsA, nsB := kubetest.UniqueNS(t, "a"), kubetest.UniqueNS(t, "b")
	kubetest.CreateNamespaces(t, admin, nsA, nsB)

	rootA := certs.NewCA(t, certs.WithCommonName("Inventory Root A"))
	rootB := certs.NewCA(t, certs.WithCommonName("Inventory Root B"))
	web := rootA.Leaf(t, certs.WithDNSNames("web.example"))
	api := rootB.Leaf(t, certs.WithDNSNames("api.example"))
	ma := rootA.Leaf(t, certs.WithDNSNames("a.example"))
	mb := rootA.Leaf(t, certs.WithDNSNames("b.example"))
	fp := func(l *certs.Leaf) string { return pki.Fingerprint(l.Cert) }

	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(nsA, "web-tls", web.CertPEM, web.KeyPEM, rootA.CertPEM))
	// ca.crt does not verify tls.crt (issued by root B), and the key is web's.
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(nsB, "api-tls", api.CertPEM, web.KeyPEM, rootA.CertPEM))
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(nsB, "broken-tls", []byte("-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"), web.KeyPEM, nil))
	kubetest.CreateSecret(t, admin, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "merged"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"a.crt": ma.CertPEM, "a.key": ma.KeyPEM, "b.crt": mb.CertPEM, "b.key": mb.KeyPEM, "ca.crt": rootA.CertPEM}})
	kubetest.CreateSecret(t, admin, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "db-password"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"password": []byte("hunter2")}})
	bundle := append(append([]byte(nil), rootB.CertPEM...), rootA.CertPEM...)
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "istio-ca-root-cert"}, Data: map[string]string{"root-cert.pem": string(bundle)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "unrelated"}, Data: map[string]string{"ca.crt": string(rootB.CertPEM)}},
	} {
		if _, err := admin.CoreV1().ConfigMaps(cm.Namespace).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create configmap: %v", err)
		}
	}

	inv := startInventory(t, tb.Config, Options{
		Namespaces:     []string{nsA, nsB},
		Layouts:        []Layout{{Cert: "*.crt", Key: "*.key", CA: "ca.crt"}},
		ConfigMapNames: []string{"istio-ca-root-cert"},
	})
	waitSynced(t, inv)
	snap := inv.Snapshot()

	var got []secretFacts
	for _, s := range snap.Secrets {
		got = append(got, secretFacts{Key: s.Key(), Type: s.Type, ChangedHow: s.ChangedHow, ChangedBy: s.ChangedBy, Items: facts(s.Items)})
	}
	want := []secretFacts{
		{Key: nsA + "/merged", Type: "Opaque", ChangedHow: kube.ChangedManagedFields, ChangedBy: "certdrift-test", Items: []itemFacts{
			{Name: "a", CertKey: "a.crt", KeyKey: "a.key", CAKey: "ca.crt", Leaf: fp(ma), ChainLen: 1, KeyMatches: ptr(true), CASize: 1},
			{Name: "b", CertKey: "b.crt", KeyKey: "b.key", CAKey: "ca.crt", Leaf: fp(mb), ChainLen: 1, KeyMatches: ptr(true), CASize: 1},
		}},
		{Key: nsA + "/web-tls", Type: "kubernetes.io/tls", ChangedHow: kube.ChangedManagedFields, ChangedBy: "certdrift-test", Items: []itemFacts{
			{CertKey: "tls.crt", KeyKey: "tls.key", CAKey: "ca.crt", Leaf: fp(web), ChainLen: 1, KeyMatches: ptr(true), CASize: 1},
		}},
		{Key: nsB + "/api-tls", Type: "kubernetes.io/tls", ChangedHow: kube.ChangedManagedFields, ChangedBy: "certdrift-test", Items: []itemFacts{
			{CertKey: "tls.crt", KeyKey: "tls.key", CAKey: "ca.crt", Leaf: fp(api), ChainLen: 1, KeyMatches: ptr(false), CASize: 1},
		}},
		{Key: nsB + "/broken-tls", Type: "kubernetes.io/tls", ChangedHow: kube.ChangedManagedFields, ChangedBy: "certdrift-test", Items: []itemFacts{
			{CertKey: "tls.crt", KeyKey: "tls.key", KeyMatches: ptr(false), ChainErr: `secret ` + nsB + `/broken-tls key "tls.crt": `},
		}},
	}
	if diff := cmp.Diff(want, got, containsErr); diff != "" {
		t.Errorf("Secret summaries (-want +got):\n%s", diff)
	}
	for _, s := range snap.Secrets {
		if s.ChangedAt.IsZero() || time.Since(s.ChangedAt) > 5*time.Minute {
			t.Errorf("%s: ChangedAt %v is not the recent creation", s.Key(), s.ChangedAt)
		}
	}

	if len(snap.ConfigMaps) != 1 || snap.ConfigMaps[0].Key() != nsA+"/istio-ca-root-cert" {
		t.Fatalf("ConfigMaps = %+v, want only %s/istio-ca-root-cert", snap.ConfigMaps, nsA)
	}
	var gotCAs []string
	for _, b := range snap.ConfigMaps[0].Bundles {
		if b.Key != "root-cert.pem" || b.Err != nil || b.Bundle == nil {
			t.Fatalf("bundle %+v, want root-cert.pem parsed", b)
		}
		for _, c := range b.Bundle.Certs {
			sum, err := c.Summary()
			if err != nil {
				t.Fatal(err)
			}
			gotCAs = append(gotCAs, sum.CommonName)
		}
	}
	if diff := cmp.Diff([]string{"Inventory Root B", "Inventory Root A"}, gotCAs); diff != "" {
		t.Errorf("CA bundle (-want +got):\n%s", diff)
	}

	// The converted view is what the audit judges: it must find exactly the planted problems.
	report := audit.Run(audit.Inputs{Config: &config.Config{}, Desired: inv.Observations()}, config.Policy{}, time.Now())
	codes := map[string][]string{}
	for _, f := range report.Findings {
		codes[string(f.Code)] = append(codes[string(f.Code)], f.Subject.Source)
	}
	wantCodes := map[string][]string{
		"KEY_MISMATCH":  {nsB + "/api-tls"},
		"CA_BUNDLE_GAP": {nsB + "/api-tls"},
		"PARSE_ERROR":   {nsB + "/broken-tls"},
	}
	if diff := cmp.Diff(wantCodes, codes); diff != "" {
		t.Errorf("audit findings on the inventory's view (-want +got):\n%s\nreport: %+v", diff, report.Findings)
	}
}

func TestUpdateAndDeleteReflectedWithinASecond(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	ns := kubetest.UniqueNS(t, "x")
	kubetest.CreateNamespaces(t, admin, ns)
	root := certs.NewCA(t)
	first, second := root.Leaf(t, certs.WithDNSNames("one.example")), root.Leaf(t, certs.WithDNSNames("two.example"))
	created := kubetest.CreateSecret(t, admin, kubetest.TLSSecret(ns, "rotating", first.CertPEM, first.KeyPEM, root.CertPEM))

	changes := make(chan kube.Change, 100)
	inv := startInventory(t, tb.Config, Options{Namespaces: []string{ns}, OnChange: func(c kube.Change) { changes <- c }})
	waitSynced(t, inv)
	before := inv.Snapshot().Secrets
	if len(before) != 1 || before[0].Items[0].Leaf().Fingerprint() != pki.Fingerprint(first.Cert) {
		t.Fatalf("initial snapshot %+v, want the first leaf", before)
	}
	expect := func(op kube.ChangeOp, within time.Duration) kube.Change {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case c := <-changes:
				if c.Op == op && c.Name == "rotating" {
					return c
				}
			case <-deadline:
				t.Fatalf("no %s event for %s/rotating within %v", op, ns, within)
			}
		}
	}
	if c := expect(kube.Added, time.Second); !c.Initial {
		t.Error("the initial list's Added is not marked Initial")
	}

	upd := created.DeepCopy()
	upd.Data = map[string][]byte{"tls.crt": second.CertPEM, "tls.key": second.KeyPEM, "ca.crt": root.CertPEM}
	start := time.Now()
	if _, err := admin.CoreV1().Secrets(ns).Update(context.Background(), upd, metav1.UpdateOptions{FieldManager: "rotator"}); err != nil {
		t.Fatalf("update: %v", err)
	}
	c := expect(kube.Updated, time.Second)
	t.Logf("update reflected after %v", time.Since(start))
	if got := c.Secret.Items[0].Leaf().Fingerprint(); got != pki.Fingerprint(second.Cert) {
		t.Errorf("updated summary leaf %s, want the second leaf", got)
	}
	if !c.Secret.ChangedAt.After(before[0].ChangedAt) {
		t.Errorf("ChangedAt %v did not move past %v", c.Secret.ChangedAt, before[0].ChangedAt)
	}
	if d := time.Since(c.Secret.ChangedAt); d > 2*time.Second || d < -2*time.Second {
		t.Errorf("ChangedAt %v is not the update time (now %v)", c.Secret.ChangedAt, time.Now())
	}
	if c.Secret.ChangedBy != "rotator" {
		t.Errorf("ChangedBy %q, want the updating field manager %q", c.Secret.ChangedBy, "rotator")
	}
	if s := inv.Snapshot().Secrets; len(s) != 1 || s[0].Items[0].Leaf().Fingerprint() != pki.Fingerprint(second.Cert) {
		t.Errorf("snapshot taken after the hook does not show the update: %+v", s)
	}

	// A label change leaves the certificates alone and must not move ChangedAt.
	cur, err := admin.CoreV1().Secrets(ns).Get(context.Background(), "rotating", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Labels = map[string]string{"touched": "yes"}
	if _, err := admin.CoreV1().Secrets(ns).Update(context.Background(), cur, metav1.UpdateOptions{FieldManager: "labeller"}); err != nil {
		t.Fatalf("label update: %v", err)
	}
	if c2 := expect(kube.Updated, time.Second); !c2.Secret.ChangedAt.Equal(c.Secret.ChangedAt) {
		t.Errorf("label-only update moved ChangedAt from %v to %v", c.Secret.ChangedAt, c2.Secret.ChangedAt)
	}

	if err := admin.CoreV1().Secrets(ns).Delete(context.Background(), "rotating", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	expect(kube.Deleted, time.Second)
	if s := inv.Snapshot().Secrets; len(s) != 0 {
		t.Errorf("deleted Secret still in snapshot: %+v", s)
	}

	// A Secret created after the sync is a change like any other.
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(ns, "rotating", first.CertPEM, first.KeyPEM, root.CertPEM))
	if c := expect(kube.Added, time.Second); c.Initial {
		t.Error("an Added after the sync is marked Initial")
	}
}

func TestTypeFilterIsServerSide(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	ns := kubetest.UniqueNS(t, "f")
	kubetest.CreateNamespaces(t, admin, ns)
	root := certs.NewCA(t)
	leaf := root.Leaf(t)
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(ns, "one", leaf.CertPEM, leaf.KeyPEM, nil))
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(ns, "two", leaf.CertPEM, leaf.KeyPEM, nil))
	for _, name := range []string{"opaque-with-cert", "opaque-other"} {
		kubetest.CreateSecret(t, admin, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"a.crt": leaf.CertPEM, "payload": make([]byte, 20<<10)}})
	}
	changes := make(chan kube.Change, 10)
	rec := &kubetest.Recorder{}
	inv := startInventory(t, kubetest.Recorded(tb.Config, rec), Options{Namespaces: []string{ns}, PageSize: 1, OnChange: func(c kube.Change) { changes <- c }})
	waitSynced(t, inv)
	// An Opaque Secret created after the sync must not arrive through the watch either.
	kubetest.CreateSecret(t, admin, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opaque-later"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"a.crt": leaf.CertPEM}})
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(ns, "three", leaf.CertPEM, leaf.KeyPEM, nil))
	deadline := time.After(5 * time.Second)
	for seen := 0; seen < 3; {
		select {
		case c := <-changes:
			if c.Op == kube.Added {
				seen++
			}
		case <-deadline:
			t.Fatalf("the third TLS Secret did not arrive")
		}
	}
	st := inv.Stats()
	// The list (one object per page) returned exactly the two TLS Secrets: the filter ran on
	// the server, and paging asked for three pages at most (two items, then the end).
	if st.ListedObjects != 2 {
		t.Errorf("listed %d objects, want the 2 TLS Secrets only", st.ListedObjects)
	}
	if st.ListRequests < 2 {
		t.Errorf("%d list requests with page size 1 for 2 Secrets: the list was not paginated", st.ListRequests)
	}
	if diff := cmp.Diff(map[string]int64{"kubernetes.io/tls": 3}, st.SecretsParsed); diff != "" {
		t.Errorf("Secrets delivered to the transform, by type (-want +got):\n%s", diff)
	}
	// What went over the wire: namespaced paths only, the type selector and the page size in
	// every list and watch, protobuf responses.
	var lists, watches int
	for _, r := range rec.Requests() {
		q, err := url.ParseQuery(r.Query)
		if err != nil {
			t.Fatalf("query %q: %v", r.Query, err)
		}
		if r.Path != "/api/v1/namespaces/"+ns+"/secrets" {
			t.Errorf("request to %s, want only %s's Secrets", r.Path, ns)
			continue
		}
		if got := q.Get("fieldSelector"); got != "type=kubernetes.io/tls" {
			t.Errorf("%s %s?%s: fieldSelector %q, want type=kubernetes.io/tls", r.Method, r.Path, r.Query, got)
		}
		if q.Get("watch") == "true" {
			watches++
			if q.Get("sendInitialEvents") != "" {
				t.Errorf("watch %s asks for initial events (WatchList), want a paginated list first", r.Query)
			}
			continue
		}
		lists++
		if q.Get("limit") != "1" {
			t.Errorf("list %s: limit %q, want 1", r.Query, q.Get("limit"))
		}
		if !strings.HasPrefix(r.ContentType, "application/vnd.kubernetes.protobuf") {
			t.Errorf("list answered as %q, want protobuf", r.ContentType)
		}
	}
	if lists < 2 || watches < 1 {
		t.Errorf("saw %d list and %d watch requests, want a paginated list and a watch", lists, watches)
	}
}

func TestClusterWideExcludesNamespaces(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	keep, drop := kubetest.UniqueNS(t, "keep"), kubetest.UniqueNS(t, "drop")
	kubetest.CreateNamespaces(t, admin, keep, drop)
	root := certs.NewCA(t)
	leaf := root.Leaf(t)
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(keep, "kept", leaf.CertPEM, leaf.KeyPEM, nil))
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(drop, "dropped", leaf.CertPEM, leaf.KeyPEM, nil))
	labelled := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: keep, Name: "trust", Labels: map[string]string{"certdrift.dev/bundle": "true"}},
		Data: map[string]string{"ca.crt": string(root.CertPEM)}}
	if _, err := admin.CoreV1().ConfigMaps(keep).Create(context.Background(), labelled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := &kubetest.Recorder{}
	inv := startInventory(t, kubetest.Recorded(tb.Config, rec), Options{ExcludeNamespaces: []string{drop}, ConfigMapSelector: "certdrift.dev/bundle=true"})
	waitSynced(t, inv)
	var got []string
	for _, s := range inv.Snapshot().Secrets {
		if s.Namespace == keep || s.Namespace == drop {
			got = append(got, s.Key())
		}
	}
	for _, c := range inv.Snapshot().ConfigMaps {
		got = append(got, "configmap:"+c.Key())
	}
	if diff := cmp.Diff([]string{keep + "/kept", "configmap:" + keep + "/trust"}, got); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
	for _, r := range rec.Requests() {
		if r.Path == "/api/v1/secrets" && !strings.Contains(r.Query, url.QueryEscape("metadata.namespace!="+drop)) {
			t.Errorf("cluster-wide request %s does not exclude %s on the server", r.Query, drop)
		}
	}
}

func TestNamespaceScopedRBAC(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	nsA, nsB := kubetest.UniqueNS(t, "a"), kubetest.UniqueNS(t, "b")
	kubetest.CreateNamespaces(t, admin, nsA, nsB)
	root := certs.NewCA(t)
	leaf := root.Leaf(t)
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(nsA, "in-a", leaf.CertPEM, leaf.KeyPEM, nil))
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(nsB, "in-b", leaf.CertPEM, leaf.KeyPEM, nil))
	user := "reader-" + nsA
	grantSecretsReader(t, admin, nsA, user)
	cfg, err := tb.ClientConfig(user)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("OnlyGrantedNamespace", func(t *testing.T) {
		inv := startInventory(t, cfg, Options{Namespaces: []string{nsA}, ConfigMapNames: []string{"istio-ca-root-cert"}})
		waitSynced(t, inv)
		s := inv.Snapshot()
		if len(s.Secrets) != 1 || s.Secrets[0].Key() != nsA+"/in-a" {
			t.Errorf("secrets %+v, want %s/in-a", s.Secrets, nsA)
		}
		if len(s.Errors) != 0 {
			t.Errorf("errors: %+v", s.Errors)
		}
	})
	t.Run("UngrantedNamespaceNamed", func(t *testing.T) {
		inv := startInventory(t, cfg, Options{Namespaces: []string{nsA, nsB}})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		err := inv.WaitSynced(ctx)
		if err == nil {
			t.Fatal("WaitSynced succeeded without access to namespace B")
		}
		if ctx.Err() != nil {
			t.Fatalf("WaitSynced hung until its deadline instead of reporting RBAC: %v", err)
		}
		t.Logf("error after %v: %v", time.Since(start), err)
		var ae *AccessError
		if !errors.As(err, &ae) {
			t.Fatalf("error %v is not an AccessError", err)
		}
		if diff := cmp.Diff(AccessError{Verb: "list", Resource: "secrets", Namespace: nsB}, *ae, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Err" }, cmp.Ignore())); diff != "" {
			t.Errorf("AccessError (-want +got):\n%s", diff)
		}
		if want := `cannot list secrets in namespace "` + nsB + `"`; !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
		if errs := inv.Snapshot().Errors; len(errs) != 1 || !errors.As(errs[0].Err, new(*AccessError)) {
			t.Errorf("snapshot errors %+v, want the one AccessError", errs)
		}
	})
	t.Run("ClusterWideRefused", func(t *testing.T) {
		inv := startInventory(t, cfg, Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err := inv.WaitSynced(ctx)
		if want := "cannot list secrets in all namespaces"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one saying %q", err, want)
		}
	})
}
