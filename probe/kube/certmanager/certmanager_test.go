package certmanager

import (
	"context"
	"encoding/base64"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

// One control plane for the package; it starts on first use, so the projection tests run
// without it.
var bed = testbed.Shared{Options: testbed.Options{Nodes: -1}}

func TestMain(m *testing.M) { os.Exit(bed.Main(m)) }

func obj(t *testing.T, y string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestProjections reads objects as cert-manager v1.21 writes them (field names from its
// pkg/apis/certmanager/v1 types), and hostile ones.
func TestProjections(t *testing.T) {
	ca := certs.NewCA(t)
	leaf := ca.Leaf(t, certs.WithDNSNames("web.example.com"))
	issued := base64.StdEncoding.EncodeToString(append(append([]byte{}, leaf.CertPEM...), ca.CertPEM...))
	ts := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }

	t.Run("Certificate", func(t *testing.T) {
		got := Certificate(obj(t, `
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: web, namespace: shop}
spec: {secretName: web-tls, dnsNames: [web.example.com], issuerRef: {name: ca, kind: Issuer}}
status:
  revision: 3
  notBefore: "2026-11-01T00:00:00Z"
  notAfter: "2027-01-30T00:00:00Z"
  renewalTime: "2027-01-15T00:00:00Z"
  failedIssuanceAttempts: 2
  lastFailureTime: "2026-11-20T10:00:00Z"
  conditions:
  - {type: Ready, status: "True", reason: Ready, message: Certificate is up to date and has not expired, lastTransitionTime: "2026-11-01T00:00:05Z"}
  - {type: Issuing, status: "False", reason: Failed, message: The certificate request has failed to complete and will be retried, lastTransitionTime: "2026-11-20T10:00:00Z"}
`))
		want := kube.CMCertificate{Namespace: "shop", Name: "web", SecretName: "web-tls", Revision: 3,
			Ready:     kube.CMCondition{Status: "True", Reason: "Ready", Message: "Certificate is up to date and has not expired", LastTransitionTime: ts("2026-11-01T00:00:05Z")},
			Issuing:   kube.CMCondition{Status: "False", Reason: "Failed", Message: "The certificate request has failed to complete and will be retried", LastTransitionTime: ts("2026-11-20T10:00:00Z")},
			NotBefore: ts("2026-11-01T00:00:00Z"), NotAfter: ts("2027-01-30T00:00:00Z"), RenewalTime: ts("2027-01-15T00:00:00Z"),
			FailedIssuanceAttempts: 2, LastFailureTime: ts("2026-11-20T10:00:00Z")}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("CertificateNeverIssued", func(t *testing.T) {
		got := Certificate(obj(t, `{apiVersion: cert-manager.io/v1, kind: Certificate, metadata: {name: new, namespace: shop}, spec: {secretName: new-tls}}`))
		if diff := cmp.Diff(kube.CMCertificate{Namespace: "shop", Name: "new", SecretName: "new-tls"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("CertificateWrongTypes", func(t *testing.T) {
		got := Certificate(obj(t, `{apiVersion: cert-manager.io/v1, kind: Certificate, metadata: {name: odd, namespace: shop}, spec: {secretName: [x]}, status: {revision: "three"}}`))
		if got.Err == nil || got.Name != "odd" || got.Namespace != "shop" {
			t.Errorf("got %+v, want the name kept and an error", got)
		}
	})
	t.Run("Request", func(t *testing.T) {
		yes := true
		u := obj(t, `
apiVersion: cert-manager.io/v1
kind: CertificateRequest
metadata:
  name: web-2
  namespace: shop
  creationTimestamp: "2026-11-20T10:00:00Z"
  annotations: {cert-manager.io/certificate-name: web, cert-manager.io/certificate-revision: "2", cert-manager.io/private-key-secret-name: web-xyz}
spec: {request: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K, issuerRef: {name: ca}}
status:
  conditions:
  - {type: Approved, status: "True", reason: cert-manager.io}
  - {type: Ready, status: "True", reason: Issued, message: Certificate fetched from issuer successfully}
`)
		_ = unstructured.SetNestedField(u, issued, "status", "certificate")
		_ = unstructured.SetNestedSlice(u, []any{map[string]any{"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "name": "web-owner", "controller": yes}}, "metadata", "ownerReferences")
		got := Request(u)
		want := kube.CMRequest{Namespace: "shop", Name: "web-2", Certificate: "web-owner", Revision: 2,
			Ready:      kube.CMCondition{Status: "True", Reason: "Issued", Message: "Certificate fetched from issuer successfully"},
			LeafSHA256: pki.Fingerprint(leaf.Cert), LeafNotAfter: leaf.Cert.NotAfter.UTC(), CreatedAt: ts("2026-11-20T10:00:00Z")}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the controller ownerReference names the Certificate, the annotation the revision (-want +got):\n%s", diff)
		}
	})
	t.Run("RequestHostile", func(t *testing.T) {
		got := Request(obj(t, `
apiVersion: cert-manager.io/v1
kind: CertificateRequest
metadata: {name: bad, namespace: shop, annotations: {cert-manager.io/certificate-name: web, cert-manager.io/certificate-revision: "-4"}}
status: {certificate: bm90IGEgY2VydGlmaWNhdGU=}
`))
		want := kube.CMRequest{Namespace: "shop", Name: "bad", Certificate: "web"}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(kube.CMRequest{}, "CreatedAt")); diff != "" {
			t.Errorf("no revision from a negative annotation, no leaf from a non-certificate (-want +got):\n%s", diff)
		}
	})
}

// TestReadOnCluster reads cert-manager on the test cluster: absent before its CRDs are
// installed (not an error), its objects once they are, and a gap (Err) for a user RBAC refuses.
func TestReadOnCluster(t *testing.T) {
	tb := bed.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := New(tb.Config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Read(ctx); got.Present || got.Err != nil || !got.Read {
		t.Fatalf("before the CRDs: %+v, want Read, not Present, no error", got)
	}
	// Watching readers started before the CRDs: one asks again every 100 ms whether they are
	// served, the control only every hour (so only the periodic check can make it notice).
	appeared := make(chan string, 16)
	watched := runReader(t, ctx, tb.Config, Options{PresenceInterval: 100 * time.Millisecond,
		OnChange: func(op kube.ChangeOp, kind, ns, name string) {
			select {
			case appeared <- string(op) + " " + kind:
			default:
			}
		}})
	late := runReader(t, ctx, tb.Config, Options{PresenceInterval: time.Hour})
	for name, w := range map[string]*Reader{"watched": watched, "late": late} {
		if got := w.Read(ctx); got.Present || got.Err != nil || !got.Read {
			t.Fatalf("%s, before the CRDs: %+v, want Read, not Present, no error", name, got)
		}
	}
	// A user without a cert-manager.io rule is refused (403) before the API server looks the
	// resource up: with no CRDs that is still "absent", not a gap (discovery settles it).
	nobody, err := tb.ClientConfig("certdrift-no-certmanager")
	if err != nil {
		t.Fatal(err)
	}
	denied, err := New(nobody, Options{Namespaces: []string{"default"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := denied.Read(ctx); got.Present || got.Err != nil || !got.Read {
		t.Errorf("before the CRDs, a user without the rule: %+v, want Read, not Present, no error", got)
	}
	deniedWatch := runReader(t, ctx, nobody, Options{Namespaces: []string{"default"}})
	if got := deniedWatch.Read(ctx); got.Present || got.Err != nil || !got.Read {
		t.Errorf("before the CRDs, a user without the rule, watching: %+v, want Read, not Present, no error", got)
	}
	// Control: the same user's list is refused, not answered 404 (else the case above proves nothing).
	ndc, err := dynamic.NewForConfig(nobody)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ndc.Resource(Certificates).Namespace("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("before the CRDs, the user's own list: %v, want 403", err)
	}

	if err := tb.InstallCertManagerCRDs(ctx, ""); err != nil {
		t.Fatal(err)
	}
	// The periodic presence check picks the CRDs up, and says so once (an early round).
	select {
	case got := <-appeared:
		if got != "added " {
			t.Errorf("first change after the CRDs were installed: %q, want cert-manager's appearance (%q)", got, "added ")
		}
	case <-ctx.Done():
		t.Fatal("the watching reader never reported cert-manager's appearance")
	}
	if got := watched.Read(ctx); !got.Present || got.Err != nil {
		t.Errorf("watched, after the CRDs: %+v, want Present, no error", got)
	}
	if got := late.Read(ctx); got.Present {
		t.Errorf("control (presence asked hourly), after the CRDs: %+v, want still not Present", got)
	}
	c := kubetest.FastAdmin(t, tb)
	ns := kubetest.UniqueNS(t, "cm")
	kubetest.CreateNamespaces(t, c, ns)
	dc, err := dynamic.NewForConfig(tb.Config)
	if err != nil {
		t.Fatal(err)
	}
	cert := &unstructured.Unstructured{Object: obj(t, `
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: web, namespace: `+ns+`}
spec: {secretName: web-tls, dnsNames: [web.example.com], issuerRef: {name: ca, kind: Issuer, group: cert-manager.io}}
`)}
	created, err := dc.Resource(Certificates).Namespace(ns).Create(ctx, cert, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Certificate: %v", err)
	}
	_ = unstructured.SetNestedField(created.Object, int64(4), "status", "revision")
	_ = unstructured.SetNestedSlice(created.Object, []any{map[string]any{"type": "Ready", "status": "False", "reason": "DoesNotExist",
		"message": "Issuing certificate as Secret does not exist", "lastTransitionTime": "2026-11-20T10:00:00Z"}}, "status", "conditions")
	if _, err := dc.Resource(Certificates).Namespace(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update Certificate status: %v", err)
	}
	// Small pages: the reader must follow continue tokens.
	paged := NewWithClient(dc, Options{Namespaces: []string{ns}, PageSize: 1})
	for i := range 3 {
		req := &unstructured.Unstructured{Object: obj(t, `
apiVersion: cert-manager.io/v1
kind: CertificateRequest
metadata: {namespace: `+ns+`, annotations: {cert-manager.io/certificate-name: web}}
spec: {request: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K, issuerRef: {name: ca}}
`)}
		req.SetName("web-" + string(rune('1'+i)))
		req.SetAnnotations(map[string]string{kube.CertManagerCertificateNameAnnotation: "web", kube.CertManagerRevisionAnnotation: string(rune('1' + i))})
		if _, err := dc.Resource(CertificateRequests).Namespace(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create CertificateRequest: %v", err)
		}
	}
	// Watching with small pages, and without discovery (presence from a one-item list).
	pagedWatch := NewWithClient(dc, Options{Namespaces: []string{ns}, PageSize: 1})
	startWatch(t, ctx, pagedWatch)
	got := paged.Read(ctx)
	if diff := cmp.Diff(got, pagedWatch.Read(ctx)); diff != "" {
		t.Errorf("watch and list disagree (-list +watch):\n%s", diff)
	}
	if !got.Present || got.Err != nil || len(got.Certificates) != 1 || len(got.Requests) != 3 {
		t.Fatalf("after the CRDs: present %v, err %v, %d certificates, %d requests; want present, 1 and 3", got.Present, got.Err, len(got.Certificates), len(got.Requests))
	}
	if c := got.Certificates[0]; c.Revision != 4 || c.Ready.Status != "False" || c.Ready.Reason != "DoesNotExist" || c.SecretName != "web-tls" {
		t.Errorf("Certificate %+v: want revision 4, Ready False (DoesNotExist), secret web-tls", c)
	}
	for i, rq := range got.Requests {
		if rq.Certificate != "web" || rq.Revision != i+1 {
			t.Errorf("request %d: %+v, want certificate web, revision %d", i, rq, i+1)
		}
	}
	// MaxObjects: 3 requests where 2 are allowed is an error, listing or watching; 3 allowed is none.
	for _, max := range []int{2, 3} {
		listed := NewWithClient(dc, Options{Namespaces: []string{ns}, MaxObjects: max})
		watching := NewWithClient(dc, Options{Namespaces: []string{ns}, MaxObjects: max})
		startWatch(t, ctx, watching)
		for name, r := range map[string]*Reader{"list": listed, "watch": watching} {
			if got := r.Read(ctx); (got.Err != nil) != (max == 2) {
				t.Errorf("%s, 3 requests, at most %d: err %v", name, max, got.Err)
			}
		}
	}

	// A user without the cert-manager.io rule: present, but a gap.
	denied, err = New(nobody, Options{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	if got := denied.Read(ctx); !got.Present || got.Err == nil {
		t.Errorf("forbidden: %+v, want present with an error", got)
	} else {
		t.Logf("OBSERVED: forbidden read: %v", got.Err)
	}
	deniedWatch = runReader(t, ctx, nobody, Options{Namespaces: []string{ns}})
	if got := deniedWatch.Read(ctx); !got.Present || got.Err == nil || deniedWatch.w.lists.Load() == 0 {
		t.Errorf("forbidden, watching: %+v after %d watch lists, want present with an error from the watch's list", got, deniedWatch.w.lists.Load())
	} else {
		t.Logf("OBSERVED: forbidden watch: %v", got.Err)
	}
}

// runReader builds a Reader on rc and runs its watch until the test ends.
func runReader(t *testing.T, ctx context.Context, rc *rest.Config, opt Options) *Reader {
	t.Helper()
	r, err := New(rc, opt)
	if err != nil {
		t.Fatal(err)
	}
	startWatch(t, ctx, r)
	return r
}

func startWatch(t *testing.T, ctx context.Context, r *Reader) {
	ctx, cancel := context.WithCancel(ctx)
	done, err := r.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
