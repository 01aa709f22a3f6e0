package inventory

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/listwatch"
)

// Options configure an Inventory. The zero value reads kubernetes.io/tls Secrets cluster-wide and
// no ConfigMaps.
type Options struct {
	// Namespaces, when set, switches to namespace-scoped mode: one informer per listed namespace
	// (and per Secret type), never a cluster-wide list or watch, so that a ServiceAccount with
	// only namespaced Roles can run the inventory.
	Namespaces []string
	// ExcludeNamespaces are left out in cluster-wide mode, by the API server
	// (metadata.namespace!=x field selectors).
	ExcludeNamespaces []string

	// SecretTypes are read with the kubernetes.io/tls layout (tls.crt, tls.key, ca.crt).
	// Default: [kubernetes.io/tls].
	SecretTypes []string
	// Layouts, when set, are applied to Opaque Secrets, which are then watched too (and only
	// then: most Opaque Secrets hold no certificates and would cost memory and API load).
	Layouts []Layout
	// SecretSelector is a label selector applied by the API server to Secrets.
	SecretSelector string

	// ConfigMapSelector selects CA-bundle ConfigMaps by label. ConfigMaps are read only when it
	// or ConfigMapNames is set.
	ConfigMapSelector string
	// ConfigMapNames are ConfigMaps read by name: "name" in every watched namespace (e.g.
	// istio-ca-root-cert) or "namespace/name".
	ConfigMapNames []string

	// PageSize is the number of objects per page of the initial list. Default 1000 (half the
	// round trips of 500; pages are decoded one object at a time, so their size costs no memory).
	PageSize int64
	// ListGCPercent is the Go GC percent (as GOGC) while an initial list runs, restored when it
	// ends: the list sets the process's peak memory (see gcpace.go). Default 50; it never raises
	// a lower setting or turns a disabled GC on; negative leaves the GC alone.
	ListGCPercent int
	// QPS and Burst bound the client's request rate. Defaults 50 and 100.
	QPS   float32
	Burst int

	// Full, when set, says which Secrets get a full summary: the others are kept as stubs (their
	// identity and change record, no certificates: kube.SecretSummary.Stub), which Snapshot leaves
	// out and Promote reads by name when a round needs them. A sharded serve sets it to its
	// shard, so that each replica holds and parses about 1/N of the certificates although every
	// replica lists every Secret. nil: every Secret is summarized in full.
	Full func(namespace, name string) bool

	// Limits bound the parsing of each value. Default pki.DefaultLimits.
	Limits pki.Limits
	// MaxItemsPerSecret bounds the items of a merged Secret. Default 1000.
	MaxItemsPerSecret int

	// OnChange is called after a summary is added, updated or deleted (see Change). It runs on
	// the informer's goroutine: it must be quick and must not block.
	OnChange func(kube.Change)
	// Logger receives the inventory's logs and client-go's (through the context logger).
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Layout names the keys of a certificate, its private key and its CA bundle in a Secret. Cert
// and Key may hold one "*", which stands for an item name: {"*.crt", "*.key", "ca.crt"} reads
// a.crt with a.key and b.crt with b.key as items "a" and "b", both with ca.crt as their bundle.
// A layout with only CA describes a trust-bundle Secret (an Opaque Secret holding only ca.crt):
// it is applied to a Secret in which no certificate layout found an item, and gives one item with
// a CA bundle and no certificate.
type Layout struct {
	Cert string
	Key  string
	CA   string
}

// TLSLayout is the layout of a kubernetes.io/tls Secret.
var TLSLayout = Layout{Cert: corev1.TLSCertKey, Key: corev1.TLSPrivateKeyKey, CA: "ca.crt"}

// CAOnlyLayouts are the CA-only layouts applied to the Secrets that Envoy pods mount or name but
// the inventory does not watch (Inventory.Fetch): "ca.crt" (cert-manager, most charts), then
// "cacert" (Istio's generic Secrets and their -cacert companions).
var CAOnlyLayouts = []Layout{{CA: "ca.crt"}, {CA: "cacert"}}

func (l Layout) validate() error {
	if l.Cert == "" {
		if l.CA == "" || l.Key != "" {
			return fmt.Errorf("layout %+v: needs a certificate key, or a CA key alone (a CA-only Secret)", l)
		}
		if strings.Contains(l.CA, "*") {
			return fmt.Errorf("layout %+v: no * in ca", l)
		}
		return nil
	}
	certStars, keyStars := strings.Count(l.Cert, "*"), strings.Count(l.Key, "*")
	if certStars > 1 || keyStars > 1 || strings.Contains(l.CA, "*") {
		return fmt.Errorf("layout %+v: at most one * in cert and key, none in ca", l)
	}
	if l.Key != "" && certStars != keyStars {
		return fmt.Errorf("layout %+v: cert and key must both have a * or neither", l)
	}
	return nil
}

const (
	defaultPageSize      = listwatch.DefaultPageSize
	defaultListGCPercent = 50
	defaultQPS           = listwatch.DefaultQPS
	defaultBurst         = listwatch.DefaultBurst
	defaultMaxItems      = 1000
)

func (o Options) withDefaults() Options {
	if len(o.SecretTypes) == 0 {
		o.SecretTypes = []string{string(corev1.SecretTypeTLS)}
	}
	if o.PageSize <= 0 {
		o.PageSize = defaultPageSize
	}
	if o.ListGCPercent == 0 {
		o.ListGCPercent = defaultListGCPercent
	}
	if o.QPS <= 0 {
		o.QPS = defaultQPS
	}
	if o.Burst <= 0 {
		o.Burst = defaultBurst
	}
	if o.MaxItemsPerSecret <= 0 {
		o.MaxItemsPerSecret = defaultMaxItems
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	for _, ns := range append(append([]string(nil), o.Namespaces...), o.ExcludeNamespaces...) {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("namespace %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if len(o.Namespaces) > 0 && len(o.ExcludeNamespaces) > 0 {
		errs = append(errs, errors.New("namespaces and excluded namespaces are exclusive"))
	}
	for _, t := range o.SecretTypes {
		if t == "" || strings.ContainsAny(t, ",=!") {
			errs = append(errs, fmt.Errorf("secret type %q is not a valid type", t))
		}
		if t == string(corev1.SecretTypeOpaque) {
			errs = append(errs, errors.New("secret type Opaque is read through Layouts, not SecretTypes"))
		}
	}
	for _, l := range o.Layouts {
		if err := l.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	for what, sel := range map[string]string{"secret selector": o.SecretSelector, "configmap selector": o.ConfigMapSelector} {
		if _, err := labels.Parse(sel); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", what, sel, err))
		}
	}
	for _, n := range o.ConfigMapNames {
		ns, name, _ := kube.SplitRef(n)
		if ns != "" {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("configmap %q: namespace: %s", n, strings.Join(msgs, "; ")))
			}
		}
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("configmap %q: name: %s", n, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}
