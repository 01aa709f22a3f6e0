package certmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/kube"
)

// The resources read, cert-manager.io/v1.
var (
	Certificates        = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
	CertificateRequests = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificaterequests"}
)

// Options configure a Reader. The zero value reads every namespace.
type Options struct {
	// Namespaces limits the reads; empty: all namespaces (cluster-wide lists).
	Namespaces []string
	// QPS and Burst bound the client's request rate (defaults 50 and 100).
	QPS   float32
	Burst int
	// PageSize is the list page size (default 500 for List, 100 for the watch's list). A page is
	// decoded whole into unstructured objects, ≈ 35 KB allocated per object (managedFields, the
	// issued chain): the page, not the cluster, sets a list's peak memory. The watch lists once,
	// beside everything serve holds, so it takes smaller pages; a one-shot audit's List keeps 500,
	// since 100 cost it ≈ 0.07 CPU-s at 4,000 objects in request overhead (docs/benchmarks.md).
	PageSize int64
	// MaxObjects bounds how many objects of each resource one read keeps (default 50,000): a
	// cluster holding more is reported as an error, never read without bound.
	MaxObjects int
	// SyncTimeout bounds how long Read waits for the watch's initial list (default 30 s, the
	// Session's sync timeout).
	SyncTimeout time.Duration
	// PresenceInterval is how often the watch asks again whether the CRDs are served while they are
	// not (default 1 minute): cert-manager installed after certdrift started is read from then
	// on, without a restart.
	PresenceInterval time.Duration
	// OnChange is called (on an informer goroutine: quick, non-blocking) after a Certificate's or
	// CertificateRequest's projection changes once the watch has listed them (kind "Certificate" or
	// "CertificateRequest"), and once with an empty kind when cert-manager appears or disappears.
	// A change to fields certdrift does not read (managedFields, a label) calls nothing.
	OnChange func(op kube.ChangeOp, kind, namespace, name string)
	// Logger receives the watch's request failures and client-go's reflector logs.
	Logger *slog.Logger
}

// Reader reads cert-manager's objects: from a watch once Start was called (watch.go), else with a
// paged list per read.
type Reader struct {
	client dynamic.Interface
	opt    Options
	// served asks the API server's discovery whether cert-manager.io/v1 is served (nil: not
	// asked). It settles a refused list: the authorizer answers before the resource is looked up,
	// so a user without a cert-manager.io rule gets 403, not 404, on a cluster without the CRDs,
	// and that must read as "absent", not as a gap. Discovery is open to every authenticated user
	// (system:discovery).
	served func(ctx context.Context) (bool, error)

	w watcher
}

// New builds a Reader from a REST config; it makes no request.
func New(rc *rest.Config, opt Options) (*Reader, error) {
	c := rest.CopyConfig(rc)
	c.QPS, c.Burst = orDefault(opt.QPS, 50), orDefault(opt.Burst, 100)
	if c.UserAgent == "" {
		c.UserAgent = "certdrift-certmanager"
	}
	client, err := dynamic.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("build cert-manager client for %s: %w", rc.Host, err)
	}
	// A plain GET of the group-version's discovery document: client-go's discovery client would
	// link the whole clientset scheme (cmd/certdrift's TestBinaryDependencies keeps it out).
	h, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("build cert-manager client for %s: %w", rc.Host, err)
	}
	base, _, err := rest.DefaultServerUrlFor(c)
	if err != nil {
		return nil, fmt.Errorf("cert-manager client for %s: %w", rc.Host, err)
	}
	groupURL := base.JoinPath("apis", Certificates.Group, Certificates.Version).String()
	r := NewWithClient(client, opt)
	r.served = func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, groupURL, nil)
		if err != nil {
			return false, err
		}
		resp, err := h.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return false, fmt.Errorf("GET %s: %w", groupURL, err)
		}
		switch resp.StatusCode {
		case http.StatusOK:
			// The group is served once any of its CRDs is established; while cert-manager's
			// CRDs are being installed that may be Issuers before Certificates.
			var doc struct {
				Resources []struct {
					Name string `json:"name"`
				} `json:"resources"`
			}
			if err := json.Unmarshal(body, &doc); err != nil {
				return false, fmt.Errorf("GET %s: %w", groupURL, err)
			}
			var n int
			for _, r := range doc.Resources {
				if r.Name == Certificates.Resource || r.Name == CertificateRequests.Resource {
					n++
				}
			}
			return n == 2, nil
		case http.StatusNotFound:
			return false, nil
		}
		return false, fmt.Errorf("GET %s: %s", groupURL, resp.Status)
	}
	return r, nil
}

// NewWithClient builds a Reader on a dynamic client.
func NewWithClient(client dynamic.Interface, opt Options) *Reader {
	opt.MaxObjects = orDefault(opt.MaxObjects, 50_000)
	opt.SyncTimeout = orDefault(opt.SyncTimeout, 30*time.Second)
	opt.PresenceInterval = orDefault(opt.PresenceInterval, time.Minute)
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reader{client: client, opt: opt}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Read returns Certificates and CertificateRequests as they are now: from the watch once Start was
// called (an unchanged read costs a copy of the sorted projections), else listed (List). It
// never fails as a whole: absent CRDs give Present false and no error; any other failure is in
// Err, with whatever could be read.
func (r *Reader) Read(ctx context.Context) kube.CertManager {
	if r.w.running.Load() {
		return r.readWatched(ctx)
	}
	return r.List(ctx)
}

// List lists Certificates and CertificateRequests now, paged, whether or not the watch runs: what
// Read does before Start is called, and the per-round read certdrift did before the watch. It never
// fails as a whole: a 404 for the Certificates means cert-manager is absent (Present false, no
// error); any other failure is in Err, with whatever could be read.
func (r *Reader) List(ctx context.Context) kube.CertManager {
	out := kube.CertManager{Read: true, Present: true}
	nss := r.opt.Namespaces
	if len(nss) == 0 {
		nss = []string{metav1.NamespaceAll}
	}
	var errs []error
	for _, ns := range nss {
		err := r.list(ctx, Certificates, ns, func(u map[string]any) {
			out.Certificates = append(out.Certificates, Certificate(u))
		})
		if apierrors.IsNotFound(err) && !isObjectNotFound(err) {
			// The resource itself is not served: the CRDs are not installed.
			return kube.CertManager{Read: true}
		}
		if apierrors.IsForbidden(err) && r.served != nil {
			if ok, derr := r.served(ctx); derr == nil && !ok {
				return kube.CertManager{Read: true} // refused, but there is nothing to read
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := r.list(ctx, CertificateRequests, ns, func(u map[string]any) {
			out.Requests = append(out.Requests, Request(u))
		}); err != nil {
			errs = append(errs, err)
		}
	}
	out.Err = errors.Join(errs...)
	slices.SortFunc(out.Certificates, func(a, b kube.CMCertificate) int { return compareKey(a.Namespace, a.Name, b.Namespace, b.Name) })
	slices.SortFunc(out.Requests, func(a, b kube.CMRequest) int { return compareKey(a.Namespace, a.Name, b.Namespace, b.Name) })
	return out
}

// isObjectNotFound tells a 404 about a named object (which a list never gets) from the 404 the
// API server answers for a resource it does not serve: the latter has no details.
func isObjectNotFound(err error) bool {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		d := se.Status().Details
		return d != nil && d.Name != ""
	}
	return false
}

func compareKey(ans, an, bns, bn string) int {
	if ans != bns {
		if ans < bns {
			return -1
		}
		return 1
	}
	switch {
	case an < bn:
		return -1
	case an > bn:
		return 1
	}
	return 0
}

// list pages through one resource, handing each object's content to each.
func (r *Reader) list(ctx context.Context, gvr schema.GroupVersionResource, ns string, each func(map[string]any)) error {
	opts := metav1.ListOptions{Limit: orDefault(r.opt.PageSize, 500)}
	n := 0
	for {
		l, err := r.client.Resource(gvr).Namespace(ns).List(ctx, opts)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return err
			}
			return fmt.Errorf("list %s in %s: %w", gvr.GroupResource(), scope(ns), err)
		}
		for i := range l.Items {
			if n++; n > r.opt.MaxObjects {
				return fmt.Errorf("list %s in %s: more than %d objects; certdrift reads at most that many", gvr.GroupResource(), scope(ns), r.opt.MaxObjects)
			}
			each(l.Items[i].Object)
			l.Items[i].Object = nil
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}

func scope(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + ns
}

// The typed projections the unstructured objects are converted into: only the fields read.
type (
	objectMeta struct {
		Namespace         string            `json:"namespace"`
		Name              string            `json:"name"`
		CreationTimestamp metav1.Time       `json:"creationTimestamp"`
		Annotations       map[string]string `json:"annotations"`
		OwnerReferences   []struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Name       string `json:"name"`
			Controller *bool  `json:"controller"`
		} `json:"ownerReferences"`
	}
	condition struct {
		Type               string      `json:"type"`
		Status             string      `json:"status"`
		Reason             string      `json:"reason"`
		Message            string      `json:"message"`
		LastTransitionTime metav1.Time `json:"lastTransitionTime"`
	}
	certificate struct {
		Metadata objectMeta `json:"metadata"`
		Spec     struct {
			SecretName string `json:"secretName"`
		} `json:"spec"`
		Status struct {
			Conditions             []condition  `json:"conditions"`
			Revision               *int         `json:"revision"`
			NotBefore              *metav1.Time `json:"notBefore"`
			NotAfter               *metav1.Time `json:"notAfter"`
			RenewalTime            *metav1.Time `json:"renewalTime"`
			FailedIssuanceAttempts *int         `json:"failedIssuanceAttempts"`
			LastFailureTime        *metav1.Time `json:"lastFailureTime"`
		} `json:"status"`
	}
	certificateRequest struct {
		Metadata objectMeta `json:"metadata"`
		Status   struct {
			Conditions  []condition `json:"conditions"`
			Certificate []byte      `json:"certificate"`
		} `json:"status"`
	}
)

// maxMessage bounds a condition message kept (they are shown in findings).
const maxMessage = 512

func conditionOf(cs []condition, typ string) kube.CMCondition {
	for _, c := range cs {
		if c.Type == typ {
			msg := c.Message
			if len(msg) > maxMessage {
				msg = msg[:maxMessage] + "…"
			}
			return kube.CMCondition{Status: c.Status, Reason: c.Reason, Message: msg, LastTransitionTime: c.LastTransitionTime.UTC()}
		}
	}
	return kube.CMCondition{}
}

func t(m *metav1.Time) time.Time {
	if m == nil {
		return time.Time{}
	}
	return m.UTC()
}

// nameOf reads just the namespace and name, for an object that does not convert.
func nameOf(u map[string]any) (ns, name string) {
	obj := unstructured.Unstructured{Object: u}
	return obj.GetNamespace(), obj.GetName()
}

// Certificate projects a Certificate's content. An object whose fields have the wrong types
// keeps its name and carries Err.
func Certificate(u map[string]any) kube.CMCertificate {
	var c certificate
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, &c); err != nil {
		ns, name := nameOf(u)
		return kube.CMCertificate{Namespace: ns, Name: name, Err: fmt.Errorf("read Certificate %s/%s: %w", ns, name, err)}
	}
	out := kube.CMCertificate{
		Namespace: c.Metadata.Namespace, Name: c.Metadata.Name, SecretName: c.Spec.SecretName,
		Ready: conditionOf(c.Status.Conditions, "Ready"), Issuing: conditionOf(c.Status.Conditions, "Issuing"),
		NotBefore: t(c.Status.NotBefore), NotAfter: t(c.Status.NotAfter), RenewalTime: t(c.Status.RenewalTime),
		LastFailureTime: t(c.Status.LastFailureTime),
	}
	if c.Status.Revision != nil {
		out.Revision = *c.Status.Revision
	}
	if c.Status.FailedIssuanceAttempts != nil {
		out.FailedIssuanceAttempts = *c.Status.FailedIssuanceAttempts
	}
	return out
}

// maxIssued bounds status.certificate: a leaf and its chain, not a CA store.
var maxIssued = pki.Limits{MaxBytes: 256 << 10, MaxCerts: 16}

// Request projects a CertificateRequest's content: the owning Certificate, the revision and the
// fingerprint of the issued leaf. The CSR is never read.
func Request(u map[string]any) kube.CMRequest {
	var r certificateRequest
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, &r); err != nil {
		ns, name := nameOf(u)
		return kube.CMRequest{Namespace: ns, Name: name}
	}
	out := kube.CMRequest{Namespace: r.Metadata.Namespace, Name: r.Metadata.Name,
		Ready: conditionOf(r.Status.Conditions, "Ready"), CreatedAt: r.Metadata.CreationTimestamp.UTC()}
	for _, o := range r.Metadata.OwnerReferences {
		if o.Kind == "Certificate" && o.Controller != nil && *o.Controller {
			out.Certificate = o.Name
		}
	}
	if out.Certificate == "" {
		out.Certificate = r.Metadata.Annotations[kube.CertManagerCertificateNameAnnotation]
	}
	if rev, err := strconv.Atoi(r.Metadata.Annotations[kube.CertManagerRevisionAnnotation]); err == nil && rev > 0 {
		out.Revision = rev
	}
	if len(r.Status.Certificate) > 0 {
		if chain, err := pki.ParseCertificates(r.Status.Certificate, maxIssued); err == nil && len(chain) > 0 {
			out.LeafSHA256 = pki.Fingerprint(chain[0])
			out.LeafNotAfter = chain[0].NotAfter.UTC()
		}
	}
	return out
}
