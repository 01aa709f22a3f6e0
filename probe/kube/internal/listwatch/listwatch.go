package listwatch

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

// Paged is the ListerWatcher of one informer. Its List fetches the initial state in pages
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
type Paged struct {
	Resource  string // "secrets" or "configmaps", for errors
	Namespace string // "" for all namespaces
	Fields    string
	Labels    string
	PageSize  int64
	ListPage  func(ctx context.Context, opts metav1.ListOptions) (items []runtime.Object, meta metav1.ListMeta, err error)
	// streamPage, when set, is used instead of listPage: it emits each object of a page as it
	// is decoded (see liststream.go), and returns errNotProtobuf, before emitting anything, when
	// the server answered in another format, in which case listPage is used.
	StreamPage func(ctx context.Context, opts metav1.ListOptions, emit func(runtime.Object) error) (metav1.ListMeta, error)
	WatchFn    func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// transform summarizes one object of a page (the informer's transform).
	Transform func(any) (any, error)
	// report records the outcome of every list and watch request (nil on success).
	Report func(verb string, err error)
	// counted after each page, for Stats.
	OnPage func(n int)
	// gcPercent is the GC percent while the list runs (see LowerGCForList); 0 leaves it alone.
	GcPercent int
}

// maxListRestarts bounds how often a list restarts when its continue token expires (a list
// slower than the server's compaction window, 5 minutes by default).
const maxListRestarts = 2

func (lw *Paged) ListWithContext(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	restore := LowerGCForList(lw.GcPercent)
	out, err := lw.list(ctx)
	restore()
	lw.Report("list", err)
	return out, err
}

func (lw *Paged) list(ctx context.Context) (runtime.Object, error) {
	for attempt := 0; ; attempt++ {
		out := &entryList{}
		cont := ""
		expired := false
		for {
			// ResourceVersion "" asks for a consistent, paginated read; "0" would let the
			// server ignore Limit and send everything at once.
			opts := metav1.ListOptions{FieldSelector: lw.Fields, LabelSelector: lw.Labels, Limit: lw.PageSize, Continue: cont}
			summaries, meta, err := lw.page(ctx, opts)
			if err != nil {
				if cont != "" && apierrors.IsResourceExpired(err) && attempt < maxListRestarts {
					expired = true
					break
				}
				return nil, lw.wrap("list", err)
			}
			out.Items = append(out.Items, summaries...)
			if lw.OnPage != nil {
				lw.OnPage(len(summaries))
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
func (lw *Paged) page(ctx context.Context, opts metav1.ListOptions) ([]runtime.Object, metav1.ListMeta, error) {
	if lw.StreamPage != nil {
		out, meta, err := transformStream(func(emit func(runtime.Object) error) (metav1.ListMeta, error) {
			return lw.StreamPage(ctx, opts, emit)
		}, lw.Transform)
		if !errors.Is(err, errNotProtobuf) || lw.ListPage == nil {
			return out, meta, err
		}
	}
	items, meta, err := lw.ListPage(ctx, opts)
	if err != nil {
		return nil, meta, err
	}
	out, err := transformPage(items, lw.Transform)
	return out, meta, err
}

func (lw *Paged) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.FieldSelector, opts.LabelSelector = lw.Fields, lw.Labels
	w, err := lw.WatchFn(ctx, opts)
	if err != nil {
		err = lw.wrap("watch", err)
	}
	lw.Report("watch", err)
	return w, err
}

// List and Watch satisfy cache.ListerWatcher for callers without a context.
func (lw *Paged) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

func (lw *Paged) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported tells the reflector to skip WatchList (see Paged).
func (lw *Paged) IsWatchListSemanticsUnSupported() bool { return true }

func (lw *Paged) wrap(verb string, err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return &AccessError{Verb: verb, Resource: lw.Resource, Namespace: lw.Namespace, Err: err}
	}
	return fmt.Errorf("%s %s %s: %w", verb, lw.Resource, scopeText(lw.Namespace), err)
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
