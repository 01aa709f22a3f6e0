package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/listwatch"
)

// Options configure a Discovery. The zero value watches Running pods cluster-wide and
// finds Envoys of every preset. Namespaces, ExcludeNamespaces, PageSize, QPS, Burst, Logger and
// Now mean what they mean in Options.
type Options struct {
	Namespaces        []string
	ExcludeNamespaces []string
	// Selectors are label selectors applied by the API server, one watch each; a pod matching
	// any of them is considered. Empty: every Running pod.
	Selectors []string
	// Presets enabled, default AllPresets.
	Presets []kube.Preset

	PageSize int64
	QPS      float32
	Burst    int
	// OnChange is called after an Envoy target is added, updated or deleted, on the informer's
	// goroutine: quick and non-blocking.
	OnChange func(op kube.ChangeOp, namespace, pod string)
	Logger   *slog.Logger
	Now      func() time.Time
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
	for _, sel := range o.Selectors {
		if _, err := labels.Parse(sel); err != nil || strings.TrimSpace(sel) == "" {
			errs = append(errs, fmt.Errorf("pod selector %q: not a label selector (%v)", sel, err))
		}
	}
	for _, p := range o.Presets {
		if _, ok := presetDefaults[p]; !ok {
			errs = append(errs, fmt.Errorf("preset %q: want one of %v", p, kube.AllPresets))
		}
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if len(o.Presets) == 0 {
		o.Presets = kube.AllPresets
	}
	if len(o.Selectors) == 0 {
		o.Selectors = []string{""}
	}
	if o.PageSize <= 0 {
		o.PageSize = listwatch.DefaultPageSize
	}
	if o.QPS <= 0 {
		o.QPS = listwatch.DefaultQPS
	}
	if o.Burst <= 0 {
		o.Burst = listwatch.DefaultBurst
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Discovery keeps the EnvoyTargets among the pods it watches. Build it with New, start
// it with Run, wait with WaitSynced, read it with Targets.
type Discovery struct {
	opts    Options
	enabled map[kube.Preset]bool
	client  *kubeapi.Client
	log     *slog.Logger
	sources []*listwatch.Source
	owners  *ownerCache
	started atomic.Bool
	host    string // the API server, for errors
}

// podEntry is what the store holds for one pod: its key and, for an Envoy, its target (shared,
// immutable). Pods that are not Envoys cost only their metadata.
type podEntry struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Target *kube.EnvoyTarget
}

// DeepCopyObject copies the metadata; the target is immutable and shared.
func (e *podEntry) DeepCopyObject() runtime.Object {
	c := *e
	e.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// New builds a Discovery reading through cfg (copied). Nothing is requested before Run.
func New(cfg *rest.Config, opts Options) (*Discovery, error) {
	if cfg == nil {
		return nil, errors.New("envoy discovery: no client configuration")
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("envoy discovery options: %w", err)
	}
	opts = opts.withDefaults()
	client, err := listwatch.NewClient(cfg, opts.QPS, opts.Burst, "certdrift-discovery")
	if err != nil {
		return nil, fmt.Errorf("envoy discovery: %w", err)
	}
	d := &Discovery{opts: opts, enabled: map[kube.Preset]bool{}, client: client, log: opts.Logger, host: cfg.Host}
	for _, p := range opts.Presets {
		d.enabled[p] = true
	}
	d.owners = newOwnerCache(client)
	scopes := opts.Namespaces
	if len(scopes) == 0 {
		scopes = []string{metav1.NamespaceAll}
	}
	// Only Running pods: one that stops running is deleted from the store by the watch, since
	// it no longer matches the field selector.
	sel := []fields.Selector{fields.OneTermEqualSelector("status.phase", string(corev1.PodRunning))}
	for _, ns := range opts.ExcludeNamespaces {
		sel = append(sel, fields.OneTermNotEqualSelector("metadata.namespace", ns))
	}
	fieldSel := fields.AndSelectors(sel...).String()
	for _, ns := range scopes {
		for _, ls := range opts.Selectors {
			d.addPodSource(ns, fieldSel, ls)
		}
	}
	return d, nil
}

func (d *Discovery) addPodSource(ns, fieldSel, labelSel string) {
	api := d.client.CoreV1().Pods(ns)
	lw := &listwatch.Paged{Resource: "pods", Namespace: ns, Fields: fieldSel, Labels: labelSel, PageSize: d.opts.PageSize,
		ListPage: func(ctx context.Context, o metav1.ListOptions) ([]runtime.Object, metav1.ListMeta, error) {
			l, err := api.List(ctx, o)
			if err != nil {
				return nil, metav1.ListMeta{}, err
			}
			return listwatch.Objects(l.Items), l.ListMeta, nil
		},
		WatchFn:   func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return api.Watch(ctx, o) },
		Transform: d.transformPod,
	}
	s := &listwatch.Source{Kind: "Pod", Namespace: ns, Desc: listwatch.Describe("pods", ns, fieldSel, labelSel)}
	lw.Report = func(verb string, err error) {
		s.Report(verb, err, d.opts.Now())
		if err != nil {
			d.log.Warn("envoy discovery request failed", "source", s.Desc, "verb", verb, "error", err.Error())
		}
	}
	s.Informer = cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{ObjectDescription: s.Desc})
	_ = s.Informer.SetTransform(d.transformPod)
	_ = s.Informer.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {})
	if d.opts.OnChange != nil {
		isEnvoy := func(obj any) bool {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			e, ok := obj.(*podEntry)
			return ok && e.Target != nil
		}
		notify := func(op kube.ChangeOp, obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if e, ok := obj.(*podEntry); ok && e.Target != nil {
				d.opts.OnChange(op, e.Namespace, e.Name)
			}
		}
		_, _ = s.Informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { notify(kube.Added, obj) },
			UpdateFunc: func(oldObj, newObj any) {
				switch was, is := isEnvoy(oldObj), isEnvoy(newObj); {
				case listwatch.SameVersion(oldObj, newObj):
				case was && !is:
					// No longer an Envoy (e.g. certdrift.dev/preset: none was added).
					notify(kube.Deleted, oldObj)
				case !was && is:
					notify(kube.Added, newObj)
				default:
					notify(kube.Updated, newObj)
				}
			},
			DeleteFunc: func(obj any) { notify(kube.Deleted, obj) },
		})
	}
	d.sources = append(d.sources, s)
}

// transformPod replaces a pod with a podEntry; idempotent (entries pass through).
func (d *Discovery) transformPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	e := &podEntry{ObjectMeta: listwatch.EntryMeta(&p.ObjectMeta)}
	if p.Status.Phase == corev1.PodRunning {
		e.Target = targetFor(p, d.enabled)
	}
	return e, nil
}

// Run starts every informer and blocks until ctx ends. It may be called once.
func (d *Discovery) Run(ctx context.Context) error {
	return listwatch.Run(ctx, &d.started, d.log, "envoy discovery", d.sources)
}

// WaitSynced is inventory.Inventory.WaitSynced for pods: nil once every informer has listed, the
// AccessError when RBAC refuses one, or an error naming the unsynced sources when ctx ends.
func (d *Discovery) WaitSynced(ctx context.Context) error {
	return listwatch.WaitSynced(ctx, "envoy discovery", d.host, d.sources)
}

// Snapshot is the Envoy targets at one moment.
type Snapshot struct {
	At      time.Time
	Synced  bool
	Targets []kube.EnvoyTarget // sorted by namespace/pod, owners resolved
	Errors  []kube.SourceError // informer failures and owner lookups that failed
}

// Targets returns the current Envoy targets with their owners resolved (ReplicaSets are read
// once and cached; ctx bounds those reads).
func (d *Discovery) Targets(ctx context.Context) Snapshot {
	snap := Snapshot{At: d.opts.Now(), Synced: true}
	seen := map[string]bool{}
	for _, s := range d.sources {
		if !s.Informer.HasSynced() {
			snap.Synced = false
		}
		if at, err := s.Err(); err != nil {
			snap.Errors = append(snap.Errors, kube.SourceError{Source: s.Desc, At: at, Err: err})
		}
		for _, obj := range s.Informer.GetStore().List() {
			e, ok := obj.(*podEntry)
			// Overlapping selectors list a pod more than once.
			if !ok || e.Target == nil || seen[string(e.UID)] {
				continue
			}
			seen[string(e.UID)] = true
			snap.Targets = append(snap.Targets, *e.Target)
		}
	}
	sort.Slice(snap.Targets, func(i, j int) bool { return snap.Targets[i].Key() < snap.Targets[j].Key() })
	snap.Errors = append(snap.Errors, d.owners.resolve(ctx, snap.Targets, d.opts.Now)...)
	return snap
}

// AccessError says that RBAC (or authentication) refused a request discovery needs: list or
// watch on pods (WaitSynced), or get on replicasets (Snapshot.Errors).
type AccessError = listwatch.AccessError
