package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/certdrift/certdrift/kubeapi"
)

// Inventory keeps summaries of the certificate Secrets and CA-bundle ConfigMaps it is configured
// to watch. Build it with New, start it with Run, wait with WaitSynced, read it with Snapshot.
type Inventory struct {
	opts    Options
	client  *kubeapi.Client
	parser  *parser
	changes *changeTracker
	// fetched tracks the changes of what Fetch reads, apart from the informers': one Secret may
	// be summarized both ways (an Opaque Secret the layouts miss but Fetch reads as CA-only), and
	// sharing one tracker would make each see the other's digest as a change.
	fetched *changeTracker
	strings *interner // namespaces, types, field managers: see interner
	log     *slog.Logger
	sources []*source
	stats   stats
	started atomic.Bool
	// host is the API server, named when the initial list never got an answer.
	host string
}

// source is one informer: one resource, one namespace (or all), one server-side filter.
type source struct {
	kind      string // "Secret" or "ConfigMap"
	namespace string
	desc      string
	informer  cache.SharedIndexInformer

	mu      sync.Mutex
	lastErr error
	errAt   time.Time
}

// SourceError is the last failure of one informer, kept until a request succeeds.
type SourceError struct {
	Source string    `json:"source"`
	At     time.Time `json:"at"`
	Err    error     `json:"-"`
}

func (s *source) report(_ string, err error, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr, s.errAt = err, now
}

func (s *source) err() (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errAt, s.lastErr
}

// New builds an Inventory reading through cfg (copied: protobuf, QPS and Burst are set on the
// copy). Nothing is requested before Run.
func New(cfg *rest.Config, opts Options) (*Inventory, error) {
	if cfg == nil {
		return nil, errors.New("kube inventory: no client configuration")
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("kube inventory options: %w", err)
	}
	opts = opts.withDefaults()
	client, err := newClient(cfg, opts.QPS, opts.Burst, "certdrift-inventory")
	if err != nil {
		return nil, fmt.Errorf("kube inventory: %w", err)
	}
	shared := newInterner(1 << 14)
	inv := &Inventory{
		opts:    opts,
		client:  client,
		parser:  &parser{limits: opts.Limits, maxItems: opts.MaxItemsPerSecret, bundles: newBundleCache(4096)},
		changes: newChangeTracker(shared),
		fetched: newChangeTracker(shared),
		strings: shared,
		log:     opts.Logger,
		host:    cfg.Host,
	}
	if err := inv.buildSources(); err != nil {
		return nil, err
	}
	return inv, nil
}

func (inv *Inventory) buildSources() error {
	scopes := inv.opts.Namespaces
	if len(scopes) == 0 {
		scopes = []string{metav1.NamespaceAll}
	}
	var exclude []fields.Selector
	for _, ns := range inv.opts.ExcludeNamespaces {
		exclude = append(exclude, fields.OneTermNotEqualSelector("metadata.namespace", ns))
	}
	types := append([]string(nil), inv.opts.SecretTypes...)
	if len(inv.opts.Layouts) > 0 {
		types = append(types, string(corev1.SecretTypeOpaque))
	}
	for _, ns := range scopes {
		for _, t := range types {
			sel := fields.AndSelectors(append([]fields.Selector{fields.OneTermEqualSelector("type", t)}, exclude...)...)
			inv.addSecretSource(ns, sel.String(), inv.opts.SecretSelector)
		}
		if inv.opts.ConfigMapSelector != "" {
			inv.addConfigMapSource(ns, fields.AndSelectors(exclude...).String(), inv.opts.ConfigMapSelector)
		}
	}
	for _, ref := range inv.opts.ConfigMapNames {
		ns, name, hasNS := SplitRef(ref)
		byName := fields.OneTermEqualSelector("metadata.name", name)
		if hasNS {
			inv.addConfigMapSource(ns, byName.String(), "")
			continue
		}
		for _, scope := range scopes {
			inv.addConfigMapSource(scope, fields.AndSelectors(append([]fields.Selector{byName}, exclude...)...).String(), "")
		}
	}
	for _, s := range inv.sources {
		if _, err := s.informer.AddEventHandler(inv.handler(s)); err != nil {
			return fmt.Errorf("kube inventory: register handler for %s: %w", s.desc, err)
		}
	}
	return nil
}

func describe(resource, ns, fieldSel, labelSel string) string {
	var b strings.Builder
	b.WriteString(resource + " " + scopeText(ns))
	if fieldSel != "" {
		b.WriteString(" fields " + fieldSel)
	}
	if labelSel != "" {
		b.WriteString(" labels " + labelSel)
	}
	return b.String()
}

// newClient builds the kubeapi client both the inventory and discovery use: a copy of cfg speaking
// protobuf (JSON accepted as a fallback) with the given rate limits.
func newClient(cfg *rest.Config, qps float32, burst int, userAgent string) (*kubeapi.Client, error) {
	c := rest.CopyConfig(cfg)
	c.ContentType = protobufContentType
	c.AcceptContentTypes = protobufContentType + ",application/json"
	c.QPS, c.Burst = qps, burst
	if c.UserAgent == "" {
		c.UserAgent = userAgent
	}
	client, err := kubeapi.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("build client for %s: %w", cfg.Host, err)
	}
	return client, nil
}

// objects turns a typed list's items into the runtime.Objects a pagedLW page holds.
func objects[T any, PT interface {
	*T
	runtime.Object
}](items []T) []runtime.Object {
	out := make([]runtime.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

func (inv *Inventory) addSecretSource(ns, fieldSel, labelSel string) {
	api := inv.client.CoreV1().Secrets(ns)
	lw := &pagedLW{resource: "secrets", namespace: ns, fields: fieldSel, labels: labelSel, pageSize: inv.opts.PageSize,
		listPage: func(ctx context.Context, o metav1.ListOptions) ([]runtime.Object, metav1.ListMeta, error) {
			inv.stats.listRequests.Add(1)
			l, err := api.List(ctx, o)
			if err != nil {
				return nil, metav1.ListMeta{}, err
			}
			return objects(l.Items), l.ListMeta, nil
		},
		streamPage: func(ctx context.Context, o metav1.ListOptions, emit func(runtime.Object) error) (metav1.ListMeta, error) {
			inv.stats.listRequests.Add(1)
			return streamPage[corev1.Secret](ctx, inv.client.CoreV1().RESTClient(), "secrets", ns, o, emit)
		},
		watchFn:   func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return api.Watch(ctx, o) },
		transform: inv.transformSecret,
	}
	inv.addSource("Secret", lw, &corev1.Secret{}, inv.transformSecret)
}

func (inv *Inventory) addConfigMapSource(ns, fieldSel, labelSel string) {
	api := inv.client.CoreV1().ConfigMaps(ns)
	lw := &pagedLW{resource: "configmaps", namespace: ns, fields: fieldSel, labels: labelSel, pageSize: inv.opts.PageSize,
		listPage: func(ctx context.Context, o metav1.ListOptions) ([]runtime.Object, metav1.ListMeta, error) {
			inv.stats.listRequests.Add(1)
			l, err := api.List(ctx, o)
			if err != nil {
				return nil, metav1.ListMeta{}, err
			}
			return objects(l.Items), l.ListMeta, nil
		},
		streamPage: func(ctx context.Context, o metav1.ListOptions, emit func(runtime.Object) error) (metav1.ListMeta, error) {
			inv.stats.listRequests.Add(1)
			return streamPage[corev1.ConfigMap](ctx, inv.client.CoreV1().RESTClient(), "configmaps", ns, o, emit)
		},
		watchFn:   func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return api.Watch(ctx, o) },
		transform: inv.transformConfigMap,
	}
	inv.addSource("ConfigMap", lw, &corev1.ConfigMap{}, inv.transformConfigMap)
}

func (inv *Inventory) addSource(kind string, lw *pagedLW, example runtime.Object, transform cache.TransformFunc) {
	s := &source{kind: kind, namespace: lw.namespace, desc: describe(lw.resource, lw.namespace, lw.fields, lw.labels)}
	lw.report = func(verb string, err error) {
		s.report(verb, err, inv.opts.Now())
		if err != nil {
			inv.log.Warn("kube inventory request failed", "source", s.desc, "verb", verb, "error", err.Error())
		}
	}
	lw.onPage = func(n int) { inv.stats.listedObjects.Add(int64(n)) }
	lw.gcPercent = max(inv.opts.ListGCPercent, 0)
	s.informer = cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{ObjectDescription: s.desc})
	// Cannot fail before the informer runs.
	_ = s.informer.SetTransform(transform)
	// client-go logs list/watch failures through klog and retries with backoff; the error is
	// already recorded by pagedLW, so only keep the retry.
	_ = s.informer.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {})
	inv.sources = append(inv.sources, s)
}

// Run starts every informer and blocks until ctx ends. It may be called once.
func (inv *Inventory) Run(ctx context.Context) error {
	if inv.started.Load() {
		return errors.New("kube inventory: Run called twice")
	}
	// The GC stays eager until the stores hold the initial lists, not only while they are
	// listed: handing 10,000 entries to the informer (DeltaFIFO, indexer, notifications)
	// allocates another ~10 MB right after the last page, when the live heap is largest.
	restore := lowerGCForList(max(inv.opts.ListGCPercent, 0))
	go func() {
		defer restore()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for !inv.Synced() {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return runSources(ctx, &inv.started, inv.log, "kube inventory", inv.sources)
}

// WaitSynced blocks until every informer has completed its initial list, returning nil; or
// until one is refused by RBAC or authentication, returning that AccessError (retrying cannot
// help); or until ctx ends, returning an error that names the unsynced sources and their last
// errors.
func (inv *Inventory) WaitSynced(ctx context.Context) error {
	return waitSources(ctx, "kube inventory", inv.host, inv.sources)
}

// runSources runs the informers of an Inventory or a Discovery until ctx ends.
func runSources(ctx context.Context, started *atomic.Bool, log *slog.Logger, what string, sources []*source) error {
	if !started.CompareAndSwap(false, true) {
		return errors.New(what + ": Run called twice")
	}
	// client-go's reflectors log through the context's logger: send it to our slog handler.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(log.Handler()))
	var wg sync.WaitGroup
	for _, s := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.informer.RunWithContext(ctx)
		}()
	}
	log.Info(what+" started", "sources", len(sources))
	wg.Wait()
	return nil
}

// waitSources is WaitSynced for any set of sources read from the API server host.
func waitSources(ctx context.Context, what, host string, sources []*source) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		synced := true
		var denied []error
		for _, s := range sources {
			if s.informer.HasSynced() {
				continue
			}
			synced = false
			if _, err := s.err(); err != nil && isAccessError(err) {
				denied = append(denied, err)
			}
		}
		if synced {
			return nil
		}
		if len(denied) > 0 {
			return errors.Join(denied...)
		}
		select {
		case <-ctx.Done():
			var msgs []string
			for _, s := range sources {
				if !s.informer.HasSynced() {
					m := s.desc
					if _, err := s.err(); err != nil {
						m += ": " + err.Error()
					} else {
						// A request still in flight: an API server that accepts connections and
						// never answers leaves no error to quote.
						m += ": no answer from the API server " + host
					}
					msgs = append(msgs, m)
				}
			}
			return fmt.Errorf("%s not synced (%w): %s", what, ctx.Err(), strings.Join(msgs, "; "))
		case <-t.C:
		}
	}
}

// Synced reports whether every informer has completed its initial list.
func (inv *Inventory) Synced() bool {
	for _, s := range inv.sources {
		if !s.informer.HasSynced() {
			return false
		}
	}
	return true
}

// Errors returns the last error of each informer whose last request failed.
func (inv *Inventory) Errors() []SourceError {
	var out []SourceError
	for _, s := range inv.sources {
		if at, err := s.err(); err != nil {
			out = append(out, SourceError{Source: s.desc, At: at, Err: err})
		}
	}
	return out
}

// Snapshot is a consistent copy of the inventory at one moment: each store is read once under
// its lock, and summaries are immutable, so later events never change a Snapshot.
type Snapshot struct {
	At     time.Time
	Synced bool
	// Secrets are sorted by namespace/name, Secrets with no certificate item left out. They are the
	// store's own summaries (immutable), not copies: a snapshot of 10,000 Secrets costs a slice.
	Secrets    []*SecretSummary
	ConfigMaps []ConfigMapSummary // sorted by namespace/name; ConfigMaps with no bundle left out
	Errors     []SourceError
}

// Snapshot returns the current summaries.
func (inv *Inventory) Snapshot() Snapshot {
	snap := Snapshot{At: inv.opts.Now(), Synced: inv.Synced(), Errors: inv.Errors()}
	seenCM := map[string]bool{}
	lists := make([][]any, len(inv.sources))
	n := 0
	for i, s := range inv.sources {
		lists[i] = s.informer.GetStore().List()
		if s.kind == "Secret" {
			n += len(lists[i])
		}
	}
	// Sized once: growing a slice of 10,000 summaries by appending allocates as much again.
	snap.Secrets = make([]*SecretSummary, 0, n)
	for _, list := range lists {
		for _, obj := range list {
			switch e := obj.(type) {
			case *secretEntry:
				if len(e.Summary.Items) > 0 || e.Summary.Err != nil {
					snap.Secrets = append(snap.Secrets, e.Summary)
				}
			case *configMapEntry:
				// A ConfigMap may be selected both by label and by name.
				if k := e.Summary.Key(); !seenCM[k] && len(e.Summary.Bundles) > 0 {
					seenCM[k] = true
					snap.ConfigMaps = append(snap.ConfigMaps, *e.Summary)
				}
			}
		}
	}
	// Building the "namespace/name" keys inside the comparison allocated ~7 MB of garbage per
	// snapshot at 10,000 Secrets: compareKeys orders the same way without building them.
	slices.SortFunc(snap.Secrets, func(a, b *SecretSummary) int {
		return compareKeys(a.Namespace, a.Name, b.Namespace, b.Name)
	})
	slices.SortFunc(snap.ConfigMaps, func(a, b ConfigMapSummary) int {
		return compareKeys(a.Namespace, a.Name, b.Namespace, b.Name)
	})
	return snap
}

// compareKeys compares aNS+"/"+aName with bNS+"/"+bName, byte by byte as strings compare, without
// building them. ("a-b/x" sorts before "a/x": not the same as comparing namespaces first.)
func compareKeys(aNS, aName, bNS, bName string) int {
	if aNS == bNS {
		return strings.Compare(aName, bName)
	}
	la, lb := len(aNS)+1+len(aName), len(bNS)+1+len(bName)
	for i := range min(la, lb) {
		if ca, cb := keyByte(aNS, aName, i), keyByte(bNS, bName, i); ca != cb {
			return cmp.Compare(ca, cb)
		}
	}
	return cmp.Compare(la, lb)
}

// keyByte is byte i of ns+"/"+name.
func keyByte(ns, name string, i int) byte {
	switch {
	case i < len(ns):
		return ns[i]
	case i == len(ns):
		return '/'
	}
	return name[i-len(ns)-1]
}
