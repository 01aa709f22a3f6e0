package inventory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/listwatch"
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
	// promoted keeps the stubs' full summaries that Promote read (Options.Full).
	promoted promotedCache
	log      *slog.Logger
	sources  []*listwatch.Source
	stats    stats
	started  atomic.Bool
	// host is the API server, named when the initial list never got an answer.
	host string
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
	client, err := listwatch.NewClient(cfg, opts.QPS, opts.Burst, "certdrift-inventory")
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
		ns, name, hasNS := kube.SplitRef(ref)
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
		if _, err := s.Informer.AddEventHandler(inv.handler(s)); err != nil {
			return fmt.Errorf("kube inventory: register handler for %s: %w", s.Desc, err)
		}
	}
	return nil
}

func (inv *Inventory) addSecretSource(ns, fieldSel, labelSel string) {
	api := inv.client.CoreV1().Secrets(ns)
	lw := &listwatch.Paged{Resource: "secrets", Namespace: ns, Fields: fieldSel, Labels: labelSel, PageSize: inv.opts.PageSize,
		ListPage: func(ctx context.Context, o metav1.ListOptions) ([]runtime.Object, metav1.ListMeta, error) {
			inv.stats.listRequests.Add(1)
			l, err := api.List(ctx, o)
			if err != nil {
				return nil, metav1.ListMeta{}, err
			}
			return listwatch.Objects(l.Items), l.ListMeta, nil
		},
		StreamPage: func(ctx context.Context, o metav1.ListOptions, emit func(runtime.Object) error) (metav1.ListMeta, error) {
			inv.stats.listRequests.Add(1)
			return listwatch.StreamPage[corev1.Secret](ctx, inv.client.CoreV1().RESTClient(), "secrets", ns, o, emit)
		},
		WatchFn:   func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return api.Watch(ctx, o) },
		Transform: inv.transformSecret,
	}
	inv.addSource("Secret", lw, &corev1.Secret{}, inv.transformSecret)
}

func (inv *Inventory) addConfigMapSource(ns, fieldSel, labelSel string) {
	api := inv.client.CoreV1().ConfigMaps(ns)
	lw := &listwatch.Paged{Resource: "configmaps", Namespace: ns, Fields: fieldSel, Labels: labelSel, PageSize: inv.opts.PageSize,
		ListPage: func(ctx context.Context, o metav1.ListOptions) ([]runtime.Object, metav1.ListMeta, error) {
			inv.stats.listRequests.Add(1)
			l, err := api.List(ctx, o)
			if err != nil {
				return nil, metav1.ListMeta{}, err
			}
			return listwatch.Objects(l.Items), l.ListMeta, nil
		},
		StreamPage: func(ctx context.Context, o metav1.ListOptions, emit func(runtime.Object) error) (metav1.ListMeta, error) {
			inv.stats.listRequests.Add(1)
			return listwatch.StreamPage[corev1.ConfigMap](ctx, inv.client.CoreV1().RESTClient(), "configmaps", ns, o, emit)
		},
		WatchFn:   func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return api.Watch(ctx, o) },
		Transform: inv.transformConfigMap,
	}
	inv.addSource("ConfigMap", lw, &corev1.ConfigMap{}, inv.transformConfigMap)
}

func (inv *Inventory) addSource(kind string, lw *listwatch.Paged, example runtime.Object, transform cache.TransformFunc) {
	s := &listwatch.Source{Kind: kind, Namespace: lw.Namespace, Desc: listwatch.Describe(lw.Resource, lw.Namespace, lw.Fields, lw.Labels)}
	lw.Report = func(verb string, err error) {
		s.Report(verb, err, inv.opts.Now())
		if err != nil {
			inv.log.Warn("kube inventory request failed", "source", s.Desc, "verb", verb, "error", err.Error())
		}
	}
	lw.OnPage = func(n int) { inv.stats.listedObjects.Add(int64(n)) }
	lw.GcPercent = max(inv.opts.ListGCPercent, 0)
	s.Informer = cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{ObjectDescription: s.Desc})
	// Cannot fail before the informer runs.
	_ = s.Informer.SetTransform(transform)
	// client-go logs list/watch failures through klog and retries with backoff; the error is
	// already recorded by pagedLW, so only keep the retry.
	_ = s.Informer.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {})
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
	restore := listwatch.LowerGCForList(max(inv.opts.ListGCPercent, 0))
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
	return listwatch.Run(ctx, &inv.started, inv.log, "kube inventory", inv.sources)
}

// WaitSynced blocks until every informer has completed its initial list, returning nil; or
// until one is refused by RBAC or authentication, returning that AccessError (retrying cannot
// help); or until ctx ends, returning an error that names the unsynced sources and their last
// errors.
func (inv *Inventory) WaitSynced(ctx context.Context) error {
	return listwatch.WaitSynced(ctx, "kube inventory", inv.host, inv.sources)
}

// Synced reports whether every informer has completed its initial list.
func (inv *Inventory) Synced() bool {
	for _, s := range inv.sources {
		if !s.Informer.HasSynced() {
			return false
		}
	}
	return true
}

// Errors returns the last error of each informer whose last request failed.
func (inv *Inventory) Errors() []kube.SourceError {
	var out []kube.SourceError
	for _, s := range inv.sources {
		if at, err := s.Err(); err != nil {
			out = append(out, kube.SourceError{Source: s.Desc, At: at, Err: err})
		}
	}
	return out
}

// Snapshot returns the current summaries.
func (inv *Inventory) Snapshot() kube.Snapshot {
	snap := kube.Snapshot{At: inv.opts.Now(), Synced: inv.Synced(), Errors: inv.Errors()}
	seenCM := map[string]bool{}
	lists := make([][]any, len(inv.sources))
	n := 0
	for i, s := range inv.sources {
		lists[i] = s.Informer.GetStore().List()
		if s.Kind == "Secret" {
			n += len(lists[i])
		}
	}
	// Sized once: growing a slice of 10,000 summaries by appending allocates as much again.
	snap.Secrets = make([]*kube.SecretSummary, 0, n)
	for _, list := range lists {
		for _, obj := range list {
			switch e := obj.(type) {
			case *secretEntry:
				if !e.Summary.Stub && (len(e.Summary.Items) > 0 || e.Summary.Err != nil) {
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
	slices.SortFunc(snap.Secrets, func(a, b *kube.SecretSummary) int {
		return compareKeys(a.Namespace, a.Name, b.Namespace, b.Name)
	})
	slices.SortFunc(snap.ConfigMaps, func(a, b kube.ConfigMapSummary) int {
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

// AccessError says that RBAC (or authentication) refused a list or watch the inventory needs; it
// names the verb, resource and namespace. WaitSynced returns it as soon as it happens.
type AccessError = listwatch.AccessError
