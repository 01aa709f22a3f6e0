package scenarios

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/shardcheck"
	"github.com/certdrift/certdrift/test/testbed"
)

var (
	certificatesGVR = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
	requestsGVR     = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificaterequests"}
)

// customResources maps the custom kinds the scenarios apply to their resources.
var customResources = map[schema.GroupVersionKind]schema.GroupVersionResource{
	{Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}:        {Group: "cert-manager.io", Version: "v1", Resource: "issuers"},
	{Group: "cert-manager.io", Version: "v1", Kind: "ClusterIssuer"}: {Group: "cert-manager.io", Version: "v1", Resource: "clusterissuers"},
	{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}:   certificatesGVR,
}

func dynamicClient() (dynamic.Interface, error) { return dynamic.NewForConfig(tb.Config) }

// createCustom creates a custom resource a scenario's manifests hold.
func createCustom(ctx context.Context, u *unstructured.Unstructured) error {
	gvr, ok := customResources[u.GroupVersionKind()]
	if !ok {
		return fmt.Errorf("no resource known for %s", u.GroupVersionKind())
	}
	dc, err := dynamicClient()
	if err != nil {
		return err
	}
	_, err = dc.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// cmCondition returns the status and reason of a cert-manager object's condition.
func cmCondition(u *unstructured.Unstructured, typ string) (status, reason string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			return s, r
		}
	}
	return "", ""
}

// setCondition replaces (or adds) a condition in an object's status, as cmctl does.
func setCondition(u *unstructured.Unstructured, typ, status, reason, message string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	conds = slices.DeleteFunc(conds, func(c any) bool { m, _ := c.(map[string]any); return m["type"] == typ })
	conds = append(conds, map[string]any{"type": typ, "status": status, "reason": reason, "message": message,
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)})
	_ = unstructured.SetNestedSlice(u.Object, conds, "status", "conditions")
}

// decidePending approves (or denies) every CertificateRequest in ns that is neither, as an
// approver policy would (the testbed's cert-manager runs without its own approver). It returns
// how many it decided.
func decidePending(ctx context.Context, dc dynamic.Interface, ns string, approve bool) (int, error) {
	l, err := dc.Resource(requestsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range l.Items {
		cr := &l.Items[i]
		if a, _ := cmCondition(cr, "Approved"); a != "" {
			continue
		}
		if d, _ := cmCondition(cr, "Denied"); d != "" {
			continue
		}
		if approve {
			setCondition(cr, "Approved", "True", "certdrift-test", "approved by the scenario")
		} else {
			setCondition(cr, "Denied", "True", "certdrift-test", "denied by the scenario (a policy refused it)")
		}
		if _, err := dc.Resource(requestsGVR).Namespace(ns).UpdateStatus(ctx, cr, metav1.UpdateOptions{}); err != nil {
			return n, fmt.Errorf("decide CertificateRequest %s: %w", cr.GetName(), err)
		}
		n++
	}
	return n, nil
}

// waitIssued approves requests until the Certificate is Ready at revision rev, then returns the
// leaf its Secret holds.
func waitIssued(ctx context.Context, t *testing.T, dc dynamic.Interface, ns, name, secret string, rev int64) *x509.Certificate {
	t.Helper()
	start := time.Now()
	poll(ctx, t, fmt.Sprintf("Certificate %s/%s Ready at revision %d", ns, name, rev), func() error {
		if _, err := decidePending(ctx, dc, ns, true); err != nil {
			return err
		}
		c, err := dc.Resource(certificatesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got, _, _ := unstructured.NestedInt64(c.Object, "status", "revision")
		ready, reason := cmCondition(c, "Ready")
		if got < rev || ready != "True" {
			return fmt.Errorf("revision %d, Ready %q (%s)", got, ready, reason)
		}
		return nil
	})
	s, err := tb.Client.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leaf := firstCert(t, "Secret "+secret, s.Data[corev1.TLSCertKey])
	t.Logf("OBSERVED: cert-manager issued revision %d of %s/%s in %s (serial %s)", rev, ns, name, time.Since(start).Round(10*time.Millisecond), serial(leaf))
	return leaf
}

// renew asks cert-manager to reissue now, as `cmctl renew` does: the Issuing condition True with
// reason ManuallyTriggered.
func renew(ctx context.Context, t *testing.T, dc dynamic.Interface, ns, name string) {
	t.Helper()
	c, err := dc.Resource(certificatesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setCondition(c, "Issuing", "True", "ManuallyTriggered", "Certificate re-issuance manually triggered")
	if _, err := dc.Resource(certificatesGVR).Namespace(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("renew Certificate %s/%s: %v", ns, name, err)
	}
}

// caSecret is the CA key pair a cert-manager CA Issuer signs with.
func caSecret(ns, name string, ca *certs.Authority) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM}}
}

// TestCertManager runs cert-manager's real CA issuing controllers (scripts/build-cert-manager.sh)
// against the testbed: a Certificate issues the Secret two static-context Envoys serve; a
// renewal updates the Secret while the Envoys keep revision 1 (STALE_REVISION beside the
// STALE_* findings); a denied request makes issuance fail while the Envoys keep serving
// (CERTIFICATE_NOT_READY); a leaf written into the Secret by hand, for the same key, leaves
// cert-manager Ready but is not what its request issued (CERTIFICATE_SECRET_MISMATCH).
func TestCertManager(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cm, err := tb.StartCertManager(ctx, testbed.CertManagerOptions{Disable: []string{"certificaterequests-approver"}})
	if err != nil {
		t.Fatalf("start cert-manager: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			lines := strings.Split(strings.TrimRight(cm.Log(), "\n"), "\n")
			t.Logf("cert-manager log (%s), last lines:\n%s", cm.LogPath, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
		cm.Stop()
	})
	t.Logf("OBSERVED: %s running", cm.Version)
	dc, err := dynamicClient()
	if err != nil {
		t.Fatal(err)
	}
	const ns, certName, secret = "cert-manager-static", "web", "web-tls"
	source := ns + "/" + secret
	ca := certs.NewCA(t)

	namespaces, rest := split(loadManifests(t, "cert-manager"))
	custom := slices.DeleteFunc(slices.Clone(rest), func(o runtime.Object) bool { _, ok := o.(*unstructured.Unstructured); return !ok })
	plain := slices.DeleteFunc(slices.Clone(rest), func(o runtime.Object) bool { _, ok := o.(*unstructured.Unstructured); return ok })
	applyObjects(ctx, t, namespaces...)
	applyObjects(ctx, t, caSecret(ns, "ca-key-pair", ca))
	applyObjects(ctx, t, custom...)
	rev1 := waitIssued(ctx, t, dc, ns, certName, secret, 1)
	applyObjects(ctx, t, plain...)
	pods := waitReady(ctx, t, ns, "app=envoy", 2)
	checkServes(t, pods, 8443, webHost, rev1)

	t.Run("Issued", func(t *testing.T) {
		code, r := runAudit(t, ns, "--grace", "1s")
		if code != 0 || len(r.Findings) != 0 {
			t.Errorf("audit after issuance: exit %d, findings %v; want 0 and none", code, r.findings())
		}
		if len(r.CertManager) != 1 || r.CertManager[0].Revision != 1 || r.CertManager[0].SecretRevision != 1 || len(r.CertManager[0].Envoys) != 2 {
			t.Fatalf("cert_manager = %+v, want Certificate web at revision 1, its Secret at 1, two Envoys", r.CertManager)
		}
		for _, e := range r.CertManager[0].Envoys {
			if e.Revision != 1 || e.View != "served" {
				t.Errorf("Envoy %s: %s revision %d, want served revision 1", e.Envoy, e.View, e.Revision)
			}
		}
	})

	t.Run("RenewedEnvoysKeepRevision1", func(t *testing.T) {
		renew(ctx, t, dc, ns, certName)
		rev2 := waitIssued(ctx, t, dc, ns, certName, secret, 2)
		if sameCert(rev1, rev2) {
			t.Fatal("revision 2 is the same certificate as revision 1")
		}
		s, err := tb.Client.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			waitVolumeFile(ctx, t, p, "tls", "tls.crt", s.Data[corev1.TLSCertKey])
		}
		time.Sleep(time.Second) // past --grace 1s after the Secret changed
		checkServes(t, pods, 8443, webHost, rev1)
		code, r := runAudit(t, ns, "--grace", "1s")
		var want []string
		for _, p := range pods {
			for _, c := range []string{"STALE_LOADED", "STALE_REVISION", "STALE_SERVED"} {
				want = append(want, c+" warning "+ns+"/"+p.Name)
			}
		}
		slices.Sort(want)
		if diff := cmp.Diff(want, r.findings()); diff != "" || code != 1 {
			t.Errorf("audit after renewal: exit %d (want 1), findings (-want +got):\n%s", code, diff)
		}
		// Split over replicas, the Certificate's series come from its Secret's replica and each
		// Envoy's revision from the Envoy's.
		shardcheck.Agree(t, certdriftBinary(t), tb.KubeconfigPath, "--namespace", ns, "--grace", "1s")
		// The exporter shows the same: the Secret at revision 2, each Envoy serving revision 1.
		srv := cdbin.StartServe(t, certdriftBinary(t), "--kubeconfig", tb.KubeconfigPath, "--namespace", ns, "--interval", "1s", "--grace", "1s")
		var wantSeries []string
		for _, p := range pods {
			wantSeries = append(wantSeries, fmt.Sprintf(`certdrift_certmanager_revision{certificate="web",envoy="%s/%s",namespace="%s",source="%s",view="served"} 1`, ns, p.Name, ns, source))
		}
		wantSeries = append(wantSeries, fmt.Sprintf(`certdrift_certmanager_revision{certificate="web",namespace="%s",source="%s",view="desired"} 2`, ns, source),
			fmt.Sprintf(`certdrift_certmanager_certificate_revision{certificate="web",namespace="%s",source="%s"} 2`, ns, source))
		var exposition []byte
		poll(ctx, t, "certdrift serve exposing the revisions", func() error {
			resp, err := http.Get("http://" + srv.Addr + "/metrics")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
			if err != nil {
				return err
			}
			for _, w := range wantSeries {
				if !strings.Contains(string(body), w+"\n") {
					return fmt.Errorf("no line %s", w)
				}
			}
			exposition = body
			return nil
		})
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Fatalf("promtool is needed: apt-get install prometheus (%v)", err)
		}
		check := exec.Command(promtool, "check", "metrics")
		check.Stdin = bytes.NewReader(exposition)
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on the exposition with cert-manager series: %v\n%s", err, out)
		}
		t.Logf("OBSERVED: /metrics shows %s", strings.Join(wantSeries, "; "))
		for _, f := range r.Findings {
			if f.Code == "STALE_REVISION" && (f.Evidence["envoy_revision"] != "1" || f.Evidence["secret_revision"] != "2" || f.Subject.Source != source) {
				t.Errorf("STALE_REVISION %s: evidence %v source %s, want envoy_revision 1, secret_revision 2, source %s", f.Subject.Envoy, f.Evidence, f.Subject.Source, source)
			}
		}
	})

	t.Run("DeniedRenewal", func(t *testing.T) {
		renew(ctx, t, dc, ns, certName)
		poll(ctx, t, "cert-manager recording the failed issuance", func() error {
			if _, err := decidePending(ctx, dc, ns, false); err != nil {
				return err
			}
			c, err := dc.Resource(certificatesGVR).Namespace(ns).Get(ctx, certName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n, _, _ := unstructured.NestedInt64(c.Object, "status", "failedIssuanceAttempts")
			issuing, reason := cmCondition(c, "Issuing")
			ready, _ := cmCondition(c, "Ready")
			if n < 1 {
				return fmt.Errorf("failedIssuanceAttempts %d, Issuing %s (%s), Ready %s", n, issuing, reason, ready)
			}
			t.Logf("OBSERVED: after the denied request: failedIssuanceAttempts %d, Issuing %s (%s), Ready %s", n, issuing, reason, ready)
			return nil
		})
		code, r := runAudit(t, ns, "--grace", "1s")
		got := r.findings("CERTIFICATE_NOT_READY")
		if diff := cmp.Diff([]string{"CERTIFICATE_NOT_READY warning "}, got); diff != "" || code != 1 {
			t.Errorf("audit after a denied renewal: exit %d (want 1), CERTIFICATE_NOT_READY (-want +got):\n%s", code, diff)
		}
		for _, f := range r.Findings {
			if f.Code == "CERTIFICATE_NOT_READY" && (f.Subject.Source != source || f.Evidence["certificate"] != ns+"/"+certName) {
				t.Errorf("CERTIFICATE_NOT_READY about %s evidence %v, want source %s and certificate %s/%s", f.Subject.Source, f.Evidence, source, ns, certName)
			}
		}
	})

	t.Run("SecretWrittenByHand", func(t *testing.T) {
		// Another writer re-signs the Secret's own key with the same names (keeping the key, so
		// cert-manager's readiness checks still pass): not the leaf revision 2's request issued.
		s, err := tb.Client.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			t.Fatalf("the Secret cert-manager wrote does not hold a key pair: %v", errors.Unwrap(err))
		}
		signer, ok := pair.PrivateKey.(crypto.Signer)
		if !ok {
			t.Fatalf("the Secret's key is a %T, not a crypto.Signer", pair.PrivateKey)
		}
		byHand := ca.Leaf(t, certs.WithDNSNames(webHost), certs.WithCommonName(webHost), certs.WithKey(signer))
		updateSecretData(ctx, t, ns, secret, map[string][]byte{corev1.TLSCertKey: byHand.CertPEM})
		time.Sleep(2 * time.Second) // past --grace 1s; cert-manager sees the Secret change meanwhile
		c, err := dc.Resource(certificatesGVR).Namespace(ns).Get(ctx, certName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready, reason := cmCondition(c, "Ready")
		t.Logf("OBSERVED: after the hand-written leaf cert-manager says Ready %s (%s)", ready, reason)
		code, r := runAudit(t, ns, "--grace", "1s")
		got := r.findings("CERTIFICATE_SECRET_MISMATCH")
		if diff := cmp.Diff([]string{"CERTIFICATE_SECRET_MISMATCH warning "}, got); diff != "" || code != 1 {
			t.Errorf("audit after a hand-written Secret: exit %d (want 1), CERTIFICATE_SECRET_MISMATCH (-want +got):\n%s", code, diff)
		}
		// The Secret's leaf is no revision of cert-manager's, although its status (whose
		// notAfter cert-manager copied from the Secret) still says revision 2.
		if got := r.findings("STALE_REVISION"); len(got) != 0 {
			t.Errorf("STALE_REVISION %v against a Secret holding no cert-manager revision", got)
		}
		if len(r.CertManager) != 1 || r.CertManager[0].SecretRevision != 0 || r.CertManager[0].Revision != 2 {
			t.Errorf("cert_manager = %+v, want the Certificate at revision 2 and the Secret at none (0)", r.CertManager)
		}
	})
	t.Run("ClusterIssuer", func(t *testing.T) {
		// A ClusterIssuer signs with a CA whose Secret lives in cert-manager's own namespace
		// (--cluster-resource-namespace), which a namespace-scoped certdrift never reads: the
		// Certificate, its requests and its Secret are all it needs, as for an Issuer.
		clusterCA := certs.NewCA(t, certs.WithCommonName("cluster-ca"))
		applyObjects(ctx, t, caSecret(testbed.CertManagerNamespace, "cluster-ca-key-pair", clusterCA))
		issuer := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
			"metadata": map[string]any{"name": "cluster-ca"},
			"spec":     map[string]any{"ca": map[string]any{"secretName": "cluster-ca-key-pair"}},
		}}
		cert := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
			"metadata": map[string]any{"name": "cluster", "namespace": ns},
			"spec": map[string]any{"secretName": "cluster-tls", "dnsNames": []any{"cluster.example.com"},
				"issuerRef": map[string]any{"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}},
		}}
		for _, o := range []*unstructured.Unstructured{issuer, cert} {
			if err := createCustom(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		leaf := waitIssued(ctx, t, dc, ns, "cluster", "cluster-tls", 1)
		if err := leaf.CheckSignatureFrom(clusterCA.Cert); err != nil {
			t.Fatalf("cluster-tls is not signed by the ClusterIssuer's CA: %v", err)
		}
		_, r := runAudit(t, ns, "--grace", "1s")
		found := false
		for _, c := range r.CertManager {
			if c.Name == "cluster" {
				found = true
				if c.Revision != 1 || c.SecretRevision != 1 || c.Ready != "True" {
					t.Errorf("cert_manager entry %+v, want revision 1, Secret at revision 1, Ready True", c)
				}
			}
		}
		if !found {
			t.Errorf("cert_manager = %+v: no Certificate cluster", r.CertManager)
		}
		for _, f := range r.Findings {
			if f.Subject.Source == ns+"/cluster-tls" {
				t.Errorf("%s %s about %s/cluster-tls, issued and unused: %s", f.Code, f.Severity, ns, f.Message)
			}
		}
	})
	t.Run("RenewalOverdueControllerDown", func(t *testing.T) {
		// A Certificate due for renewal 5 s after issuance (no webhook validates the odd
		// renewBefore), then cert-manager stops: the renewal time passes, the Secret stays.
		soon := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
			"metadata": map[string]any{"name": "soon", "namespace": ns},
			"spec": map[string]any{"secretName": "soon-tls", "commonName": webHost, "dnsNames": []any{webHost},
				"duration": "1h", "renewBefore": "59m55s",
				"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
				"issuerRef":  map[string]any{"name": "ca", "kind": "Issuer", "group": "cert-manager.io"}},
		}}
		if err := createCustom(ctx, soon); err != nil {
			t.Fatal(err)
		}
		waitIssued(ctx, t, dc, ns, "soon", "soon-tls", 1)
		if err := cm.Stop(); err != nil {
			t.Logf("stop cert-manager: %v", err)
		}
		c, err := dc.Resource(certificatesGVR).Namespace(ns).Get(ctx, "soon", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		renewal, _, _ := unstructured.NestedString(c.Object, "status", "renewalTime")
		due, err := time.Parse(time.RFC3339, renewal)
		if err != nil {
			t.Fatalf("status.renewalTime %q: %v", renewal, err)
		}
		t.Logf("OBSERVED: cert-manager stopped; Certificate soon due for renewal at %s", renewal)
		time.Sleep(time.Until(due.Add(2 * time.Second))) // past the renewal time and --grace 1s
		code, r := runAudit(t, ns, "--grace", "1s")
		// Critical: the leaf expires within the hour, well inside expiring_critical.
		if diff := cmp.Diff([]string{"RENEWAL_OVERDUE critical "}, r.findings("RENEWAL_OVERDUE")); diff != "" || code != 1 {
			t.Errorf("audit with cert-manager down past the renewal time: exit %d (want 1), RENEWAL_OVERDUE (-want +got):\n%s", code, diff)
		}
		for _, f := range r.Findings {
			if f.Code == "RENEWAL_OVERDUE" && (f.Subject.Source != ns+"/soon-tls" || f.Evidence["renewal_time"] != renewal) {
				t.Errorf("RENEWAL_OVERDUE about %s with evidence %v, want source %s/soon-tls and renewal_time %s", f.Subject.Source, f.Evidence, ns, renewal)
			}
		}
		// Control: web's renewal time is weeks away.
		for _, f := range r.Findings {
			if f.Code == "RENEWAL_OVERDUE" && f.Subject.Source == source {
				t.Errorf("RENEWAL_OVERDUE for %s, whose renewal is not due", source)
			}
		}
		// soon-tls holds a leaf for web's names, but the Envoys mount only web-tls: what they
		// hold is web-tls's (stale) leaf, not an old copy of soon-tls. Before this was checked,
		// certdrift bound them to soon-tls by those names too and reported them STALE_LOADED.
		for _, f := range r.Findings {
			if f.Subject.Source == ns+"/soon-tls" && f.Subject.Envoy != "" {
				t.Errorf("%s %s: Envoy %s judged against %s/soon-tls, which it does not mount: %s", f.Code, f.Severity, f.Subject.Envoy, ns, f.Message)
			}
		}
		for _, b := range r.Bindings {
			if b.Source == ns+"/soon-tls" {
				t.Errorf("binding %s → %s (origin %s): the Envoys mount only %s", b.Envoy, b.Source, b.Origin, source)
			}
		}
	})
	if strings.Contains(cm.Log(), "PRIVATE KEY") {
		t.Error("cert-manager's log holds private key material")
	}
}
