package kube

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// pagedLW is the ListerWatcher of one informer. Its List fetches the initial state in pages
// (Limit/Continue) and summarizes each page before asking for the next, so that at most one
// page of Secret data is alive at a time; it returns the summaries as one list, which the
// reflector hands to the store (the transform lets them through unchanged).
//
// Why not WatchList (streaming initial events, KEP-3157), which client-go v0.37 tries first by
// default: kube-apiserver turned its WatchList feature back off by default in 1.33 (still off in
// 1.36), so on most clusters the attempt fails and client-go falls back to a list that gathers
// every page, data included, before the transform sees any of it: the peak memory this package
// exists to avoid. A paginated list works on every server, is served from the watch cache for
// RV="" consistent reads since 1.31, and bounds memory the same way. So this ListerWatcher
// declares that it does not support WatchList semantics.
type pagedLW struct {
	resource  string // "secrets" or "configmaps", for errors
	namespace string // "" for all namespaces
	fields    string
	labels    string
	pageSize  int64
	listPage  func(ctx context.Context, opts metav1.ListOptions) (items []runtime.Object, meta metav1.ListMeta, err error)
	// streamPage, when set, is used instead of listPage: it emits each object of a page as it
	// is decoded (see liststream.go), and returns errNotProtobuf, before emitting anything, when
	// the server answered in another format, in which case listPage is used.
	streamPage func(ctx context.Context, opts metav1.ListOptions, emit func(runtime.Object) error) (metav1.ListMeta, error)
	watchFn    func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// transform summarizes one object of a page (the informer's transform).
	transform func(any) (any, error)
	// report records the outcome of every list and watch request (nil on success).
	report func(verb string, err error)
	// counted after each page, for Stats.
	onPage func(n int)
	// gcPercent is the GC percent while the list runs (see lowerGCForList); 0 leaves it alone.
	gcPercent int
}

// maxListRestarts bounds how often a list restarts when its continue token expires (a list
// slower than the server's compaction window, 5 minutes by default).
const maxListRestarts = 2

func (lw *pagedLW) ListWithContext(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	restore := lowerGCForList(lw.gcPercent)
	out, err := lw.list(ctx)
	restore()
	lw.report("list", err)
	return out, err
}

func (lw *pagedLW) list(ctx context.Context) (runtime.Object, error) {
	for attempt := 0; ; attempt++ {
		out := &entryList{}
		cont := ""
		expired := false
		for {
			// ResourceVersion "" asks for a consistent, paginated read; "0" would let the
			// server ignore Limit and send everything at once.
			opts := metav1.ListOptions{FieldSelector: lw.fields, LabelSelector: lw.labels, Limit: lw.pageSize, Continue: cont}
			summaries, meta, err := lw.page(ctx, opts)
			if err != nil {
				if cont != "" && apierrors.IsResourceExpired(err) && attempt < maxListRestarts {
					expired = true
					break
				}
				return nil, lw.wrap("list", err)
			}
			out.Items = append(out.Items, summaries...)
			if lw.onPage != nil {
				lw.onPage(len(summaries))
			}
			if cont == "" {
				out.ResourceVersion = meta.ResourceVersion
			}
			if cont = meta.Continue; cont == "" {
				break
			}
		}
		if !expired {
			return out, nil
		}
	}
}

// page fetches and summarizes one page, streaming when it can.
func (lw *pagedLW) page(ctx context.Context, opts metav1.ListOptions) ([]runtime.Object, metav1.ListMeta, error) {
	if lw.streamPage != nil {
		out, meta, err := transformStream(func(emit func(runtime.Object) error) (metav1.ListMeta, error) {
			return lw.streamPage(ctx, opts, emit)
		}, lw.transform)
		if !errors.Is(err, errNotProtobuf) || lw.listPage == nil {
			return out, meta, err
		}
	}
	items, meta, err := lw.listPage(ctx, opts)
	if err != nil {
		return nil, meta, err
	}
	out, err := transformPage(items, lw.transform)
	return out, meta, err
}

func (lw *pagedLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.FieldSelector, opts.LabelSelector = lw.fields, lw.labels
	w, err := lw.watchFn(ctx, opts)
	if err != nil {
		err = lw.wrap("watch", err)
	}
	lw.report("watch", err)
	return w, err
}

// List and Watch satisfy cache.ListerWatcher for callers without a context.
func (lw *pagedLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

func (lw *pagedLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported tells the reflector to skip WatchList (see pagedLW).
func (lw *pagedLW) IsWatchListSemanticsUnSupported() bool { return true }

func (lw *pagedLW) wrap(verb string, err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return &AccessError{Verb: verb, Resource: lw.resource, Namespace: lw.namespace, Err: err}
	}
	return fmt.Errorf("%s %s %s: %w", verb, lw.resource, scopeText(lw.namespace), err)
}

func scopeText(ns string) string {
	if ns == "" {
		return "in all namespaces"
	}
	return fmt.Sprintf("in namespace %q", ns)
}

// AccessError says that RBAC (or authentication) refused a request the inventory needs. It names
// the verb, the resource and the namespace, so the missing Role rule can be written from it.
type AccessError struct {
	Verb      string // "list" or "watch"
	Resource  string // "secrets" or "configmaps"
	Namespace string // "" for a cluster-wide request
	Err       error
}

func (e *AccessError) Error() string {
	grant := fmt.Sprintf("a Role in namespace %q", e.Namespace)
	if e.Namespace == "" {
		grant = "a ClusterRole (or list namespaces explicitly and use Roles)"
	}
	what := "forbidden"
	if apierrors.IsUnauthorized(e.Err) {
		what = "unauthorized"
	}
	return fmt.Sprintf("cannot %s %s %s: %s; it needs %s granting list and watch on %s: %v",
		e.Verb, e.Resource, scopeText(e.Namespace), what, grant, e.Resource, e.Err)
}

func (e *AccessError) Unwrap() error { return e.Err }

// isAccessError reports whether err is an AccessError: retrying will not help until someone
// changes RBAC.
func isAccessError(err error) bool {
	var ae *AccessError
	return errors.As(err, &ae)
}

// transformPage summarizes one page with up to GOMAXPROCS workers (at most 4): parsing keys and
// certificates is nearly all of the inventory's CPU, and on the reflector's one goroutine the
// other cores sat idle (docs/benchmarks.md). The transforms are safe for concurrent use (their
// shared state is behind mutexes). Each object is dropped from the page once summarized.
func transformPage(items []runtime.Object, transform func(any) (any, error)) ([]runtime.Object, error) {
	out := make([]runtime.Object, len(items))
	workers := min(goruntime.GOMAXPROCS(0), 4, len(items))
	if workers <= 1 {
		for i, obj := range items {
			e, err := transform(obj)
			if err != nil {
				return nil, err
			}
			out[i], items[i] = e.(runtime.Object), nil
		}
		return out, nil
	}
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(items) {
					return
				}
				e, err := transform(items[i])
				if err != nil {
					errOnce.Do(func() { first = err })
					next.Store(int64(len(items))) // stop the others early
					return
				}
				out[i], items[i] = e.(runtime.Object), nil
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}
