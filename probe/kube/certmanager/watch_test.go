package certmanager

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
)

// TestWatchOnCluster: once the watch has listed, a Certificate's status update (the status
// subresource, as cert-manager writes it) reaches the next Read and calls OnChange without another
// list; an update certdrift reads nothing of calls nothing; a deleted Certificate disappears.
func TestWatchOnCluster(t *testing.T) {
	tb := bed.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := tb.InstallCertManagerCRDs(ctx, ""); err != nil {
		t.Fatal(err)
	}
	c := kubetest.FastAdmin(t, tb)
	ns := kubetest.UniqueNS(t, "cmw")
	kubetest.CreateNamespaces(t, c, ns)
	dc, err := dynamic.NewForConfig(tb.Config)
	if err != nil {
		t.Fatal(err)
	}
	certs := dc.Resource(Certificates).Namespace(ns)
	created, err := certs.Create(ctx, &unstructured.Unstructured{Object: obj(t, `
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: web, namespace: `+ns+`}
spec: {secretName: web-tls, dnsNames: [web.example.com], issuerRef: {name: ca, kind: Issuer, group: cert-manager.io}}
`)}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Certificate: %v", err)
	}
	setStatus := func(u *unstructured.Unstructured, revision int64, ready string) *unstructured.Unstructured {
		t.Helper()
		_ = unstructured.SetNestedField(u.Object, revision, "status", "revision")
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Ready", "status": ready, "reason": "Test",
			"lastTransitionTime": "2026-11-20T10:00:00Z"}}, "status", "conditions")
		out, err := certs.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("update Certificate status: %v", err)
		}
		return out
	}
	created = setStatus(created, 1, "False")

	changes := make(chan string, 64)
	r := NewWithClient(dc, Options{Namespaces: []string{ns}, OnChange: func(op kube.ChangeOp, kind, ns, name string) {
		changes <- fmt.Sprintf("%s %s %s/%s", op, kind, ns, name)
	}})
	startWatch(t, ctx, r)
	got := r.Read(ctx)
	if got.Err != nil || len(got.Certificates) != 1 || got.Certificates[0].Revision != 1 {
		t.Fatalf("first read: %+v, want one Certificate at revision 1", got)
	}
	lists := r.w.lists.Load()
	if lists != 2 {
		t.Errorf("lists after the first read: %d, want 2 (Certificates, CertificateRequests)", lists)
	}
	next := func(what string) string {
		t.Helper()
		select {
		case ch := <-changes:
			return ch
		case <-ctx.Done():
			t.Fatalf("no change reported after %s", what)
			return ""
		}
	}

	// Control: a label changes the object (a new resourceVersion) but nothing certdrift reads;
	// the status update after it must be the first change reported.
	created.SetLabels(map[string]string{"team": "web"})
	if created, err = certs.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label the Certificate: %v", err)
	}
	setStatus(created, 2, "True")
	if ch, want := next("the status update"), "updated Certificate "+ns+"/web"; ch != want {
		t.Errorf("first change: %q, want %q (a label change is none)", ch, want)
	}
	got = r.Read(ctx)
	if len(got.Certificates) != 1 || got.Certificates[0].Revision != 2 || got.Certificates[0].Ready.Status != "True" {
		t.Errorf("read after the status update: %+v, want revision 2, Ready True", got.Certificates)
	}
	// A list of the API server now agrees.
	if diff := cmp.Diff(NewWithClient(dc, Options{Namespaces: []string{ns}}).List(ctx), got); diff != "" {
		t.Errorf("watch and a fresh list disagree (-list +watch):\n%s", diff)
	}
	if n := r.w.lists.Load(); n != lists {
		t.Errorf("lists: %d after the update, want %d: the change came by the watch, not a relist", n, lists)
	}

	if err := certs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Certificate: %v", err)
	}
	if ch, want := next("the deletion"), "deleted Certificate "+ns+"/web"; ch != want {
		t.Errorf("change: %q, want %q", ch, want)
	}
	if got := r.Read(ctx); len(got.Certificates) != 0 || got.Err != nil {
		t.Errorf("read after the deletion: %+v, want no Certificate", got)
	}
}

// TestSameCertificate: what counts as a change of a Certificate's projection (an OnChange).
func TestSameCertificate(t *testing.T) {
	base := kube.CMCertificate{Namespace: "shop", Name: "web", SecretName: "web-tls", Revision: 2,
		Ready: kube.CMCondition{Status: "True", LastTransitionTime: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)}}
	with := func(f func(*kube.CMCertificate)) kube.CMCertificate { c := base; f(&c); return c }
	cases := map[string]struct {
		reason string
		a, b   kube.CMCertificate
		same   bool
	}{
		"Equal":         {reason: "nothing changed", a: base, b: base, same: true},
		"Revision":      {reason: "a renewal", a: base, b: with(func(c *kube.CMCertificate) { c.Revision = 3 }), same: false},
		"Ready":         {reason: "readiness lost", a: base, b: with(func(c *kube.CMCertificate) { c.Ready.Status = "False" }), same: false},
		"TransitionAt":  {reason: "a condition's time", a: base, b: with(func(c *kube.CMCertificate) { c.Ready.LastTransitionTime = time.Time{} }), same: false},
		"SameErrorText": {reason: "two reads of one malformed object: distinct error values, same text", a: with(func(c *kube.CMCertificate) { c.Err = errors.New("bad") }), b: with(func(c *kube.CMCertificate) { c.Err = errors.New("bad") }), same: true},
		"ErrorText":     {reason: "another error", a: with(func(c *kube.CMCertificate) { c.Err = errors.New("bad") }), b: with(func(c *kube.CMCertificate) { c.Err = errors.New("worse") }), same: false},
		"ErrorGone":     {reason: "fixed", a: with(func(c *kube.CMCertificate) { c.Err = errors.New("bad") }), b: base, same: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := sameCertificate(tc.a, tc.b); got != tc.same {
				t.Errorf("%s: sameCertificate = %v, want %v", tc.reason, got, tc.same)
			}
		})
	}
}

// TestWatchCRDsDeleted: CRDs deleted under a running watch make cert-manager absent (not an
// error, no stale objects), and installed again, present without a restart.
func TestWatchCRDsDeleted(t *testing.T) {
	tb := bed.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := tb.InstallCertManagerCRDs(ctx, ""); err != nil {
		t.Fatal(err)
	}
	c := kubetest.FastAdmin(t, tb)
	ns := kubetest.UniqueNS(t, "cmd")
	kubetest.CreateNamespaces(t, c, ns)
	dc, err := dynamic.NewForConfig(tb.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Resource(Certificates).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: obj(t, `
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: web, namespace: `+ns+`}
spec: {secretName: web-tls, issuerRef: {name: ca}}
`)}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Certificate: %v", err)
	}
	changes := make(chan string, 64)
	r := runReader(t, ctx, tb.Config, Options{Namespaces: []string{ns}, PresenceInterval: 100 * time.Millisecond,
		OnChange: func(op kube.ChangeOp, kind, ns, name string) { changes <- string(op) + " " + kind }})
	if got := r.Read(ctx); !got.Present || len(got.Certificates) != 1 {
		t.Fatalf("with the CRDs: %+v, want present, one Certificate", got)
	}
	await := func(want string) {
		t.Helper()
		for {
			select {
			case got := <-changes:
				if got == want {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no %q change", want)
			}
		}
	}
	crds := []string{"crd/certificates.cert-manager.io", "crd/certificaterequests.cert-manager.io"}
	if out, err := tb.Kubectl(ctx, append([]string{"delete", "--wait"}, crds...)...); err != nil {
		t.Fatalf("delete CRDs: %v\n%s", err, out)
	}
	await("deleted ") // cert-manager gone (the Certificate's own deletion may come first)
	if got := r.Read(ctx); got.Present || got.Err != nil || len(got.Certificates) != 0 {
		t.Errorf("CRDs deleted: %+v, want not present, no error, nothing", got)
	}
	if err := tb.InstallCertManagerCRDs(ctx, ""); err != nil {
		t.Fatal(err)
	}
	await("added ")
	if got := r.Read(ctx); !got.Present || got.Err != nil || len(got.Certificates) != 0 {
		t.Errorf("CRDs installed again: %+v, want present, no error, nothing (the Certificate went with its CRD)", got)
	}
}
