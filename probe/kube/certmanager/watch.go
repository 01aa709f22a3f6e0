package certmanager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/listwatch"
)

// The watch.
//
// A round used to list every Certificate and CertificateRequest: at thousands of them that is the
// same CPU and garbage every round whether anything changed or not, and a renewal waited for the
// next round. Start keeps them instead with client-go's SharedIndexInformer (one per resource and
// namespace, as the inventory and discovery do), for what it already gets right and a hand-written
// watch loop would have to: the list's resourceVersion handed to the watch, reconnects, a relist
// after the watch expires (410 Gone), backoff, and a store whose List is one consistent view.
// The ListerWatcher is listwatch.Paged, the inventory's: it lists page by page and projects each
// page before asking for the next, so only one page of unstructured objects is alive at a time
// and the store holds only the projections (entry below; the informer's transform converts each
// watch event the same way). A bare cache.Reflector with our own store would do as well, but the
// informer adds event handlers, which the change callback needs, and HasSynced.
//
// Presence: the informers run only while the API server serves cert-manager.io/v1. Without it the
// Reader asks again every PresenceInterval; a list answered 404 (the CRDs deleted) stops them and it
// goes back to asking.
//
// Before the initial list, Read waits for it (at most SyncTimeout) rather than listing on its own:
// the Session starts the watch as soon as its inventory has listed, so the list is done, or nearly,
// when the first round reads it; a fallback list would send the same requests twice, and hold a
// second copy of the pages at the process's peak. (A one-shot audit never starts the watch.)

// entry is what the informers' stores hold: the projection and the metadata the store and the
// reflector need, never the object.
type entry[T any] struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	V T
}

// DeepCopyObject copies the metadata; the projection is a value.
func (e *entry[T]) DeepCopyObject() runtime.Object {
	c := *e
	e.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// listGCPercent is the GC percent while the watch's list runs (the inventory's default).
const listGCPercent = 50

// watcher is a Reader's watch state.
type watcher struct {
	running atomic.Bool
	lists   atomic.Int64 // list requests (first pages) the informers made, for tests

	mu      sync.Mutex
	checked bool // the first presence check has answered
	present bool
	sources []*listwatch.Source // of the running informers; nil while absent
}

// Start watches Certificates and CertificateRequests until ctx ends; Read reads from the watch as
// soon as Start returns. The channel is closed when the watch has stopped. It may be called once.
func (r *Reader) Start(ctx context.Context) (<-chan struct{}, error) {
	if !r.w.running.CompareAndSwap(false, true) {
		return nil, errors.New("cert-manager reader: Start called twice")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx)
	}()
	return done, nil
}

func (r *Reader) run(ctx context.Context) {
	// client-go's reflectors log through the context's logger.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(r.opt.Logger.Handler()))
	for {
		served := r.isServed(ctx)
		if ctx.Err() != nil {
			return // stopping: a check cut short says nothing about the CRDs
		}
		if !served {
			r.setAbsent(false)
		} else if gone, listed := r.watchUntilGone(ctx); gone {
			// Said only if a round could have read the objects: CRDs still being installed
			// (a 404 right after discovery said yes) were never announced.
			r.setAbsent(listed)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.opt.PresenceInterval):
		}
	}
}

// isServed asks whether cert-manager.io/v1's certificates are served: discovery when the Reader
// has it, else a one-item list (404: not served). When discovery itself fails the answer is yes:
// the informers' own requests then say what is wrong, as a gap rather than an absence.
func (r *Reader) isServed(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, r.opt.SyncTimeout)
	defer cancel()
	if r.served != nil {
		ok, err := r.served(ctx)
		if err != nil {
			r.opt.Logger.Warn("cert-manager discovery failed; watching anyway", "err", err)
			return true
		}
		return ok
	}
	ns := metav1.NamespaceAll
	if len(r.opt.Namespaces) > 0 {
		ns = r.opt.Namespaces[0]
	}
	_, err := r.client.Resource(Certificates).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
	return !resourceNotServed(err)
}

// resourceNotServed tells the 404 of a resource the API server does not serve.
func resourceNotServed(err error) bool {
	return apierrors.IsNotFound(err) && !isObjectNotFound(err)
}

func (r *Reader) setAbsent(announce bool) {
	r.w.mu.Lock()
	r.w.checked, r.w.present, r.w.sources = true, false, nil
	r.w.mu.Unlock()
	if announce {
		r.opt.Logger.Info("cert-manager CRDs no longer served")
		r.notify(kube.Deleted, "", "", "")
	}
}

// watchUntilGone runs the informers until ctx ends or a list says the resources are gone (gone),
// and says whether every informer had listed (listed).
func (r *Reader) watchUntilGone(ctx context.Context) (gone, listed bool) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	goneCh := make(chan struct{}, 1)
	var sources []*listwatch.Source
	nss := r.opt.Namespaces
	if len(nss) == 0 {
		nss = []string{metav1.NamespaceAll}
	}
	for _, ns := range nss {
		sources = append(sources,
			newSource(r, Certificates, "Certificate", ns, goneCh, Certificate, sameCertificate),
			newSource(r, CertificateRequests, "CertificateRequest", ns, goneCh, Request, func(a, b kube.CMRequest) bool { return a == b }))
	}
	r.w.mu.Lock()
	appeared := r.w.checked && !r.w.present
	r.w.checked, r.w.present, r.w.sources = true, true, sources
	r.w.mu.Unlock()

	var wg sync.WaitGroup
	for _, s := range sources {
		wg.Go(func() { s.Informer.RunWithContext(wctx) })
	}
	if appeared {
		// Installed after certdrift started: one early round once everything is listed.
		r.opt.Logger.Info("cert-manager CRDs served; watching")
		wg.Go(func() {
			if cache.WaitForCacheSync(wctx.Done(), informersSynced(sources)...) {
				r.notify(kube.Added, "", "", "")
			}
		})
	}
	select {
	case <-ctx.Done():
	case <-goneCh:
		gone = true
	}
	listed = true
	for _, s := range sources {
		listed = listed && s.Informer.HasSynced()
	}
	stop()
	wg.Wait()
	return gone, listed
}

func informersSynced(sources []*listwatch.Source) []cache.InformerSynced {
	out := make([]cache.InformerSynced, len(sources))
	for i, s := range sources {
		out[i] = s.Informer.HasSynced
	}
	return out
}

func (r *Reader) notify(op kube.ChangeOp, kind, ns, name string) {
	if r.opt.OnChange != nil {
		r.opt.OnChange(op, kind, ns, name)
	}
}

// bump says a change to OnChange (not for the initial list: the first round reads it all).
func (r *Reader) bump(op kube.ChangeOp, kind, ns, name string, initial bool) {
	if !initial {
		r.notify(op, kind, ns, name)
	}
}

// newSource builds one informer: resource gvr in namespace ns, projected by project.
func newSource[T any](r *Reader, gvr schema.GroupVersionResource, kind, ns string, gone chan<- struct{},
	project func(map[string]any) T, same func(a, b T) bool) *listwatch.Source {
	api := r.client.Resource(gvr).Namespace(ns)
	transform := func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // already an entry: list pages are projected as they are read
		}
		return &entry[T]{ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName(),
			UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()}, V: project(u.Object)}, nil
	}
	listed := 0 // objects in the list being read; one list at a time per informer
	lw := &listwatch.Paged{Resource: gvr.GroupResource().String(), Namespace: ns, PageSize: orDefault(r.opt.PageSize, 100),
		ListPage: func(ctx context.Context, o metav1.ListOptions) ([]runtime.Object, metav1.ListMeta, error) {
			if o.Continue == "" {
				listed = 0
				r.w.lists.Add(1)
			}
			l, err := api.List(ctx, o)
			if err != nil {
				return nil, metav1.ListMeta{}, err
			}
			if listed += len(l.Items); listed > r.opt.MaxObjects {
				return nil, metav1.ListMeta{}, fmt.Errorf("more than %d objects; certdrift reads at most that many", r.opt.MaxObjects)
			}
			items := make([]runtime.Object, len(l.Items))
			for i := range l.Items {
				items[i] = &l.Items[i]
			}
			return items, metav1.ListMeta{ResourceVersion: l.GetResourceVersion(), Continue: l.GetContinue()}, nil
		},
		WatchFn:   func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return api.Watch(ctx, o) },
		Transform: transform,
		// The initial list is this reader's peak, and it runs beside the inventory's: collect
		// eagerly while it runs, as the inventory does (listwatch.LowerGCForList).
		GcPercent: listGCPercent,
	}
	s := &listwatch.Source{Kind: kind, Namespace: ns, Desc: listwatch.Describe(lw.Resource, ns, "", "")}
	lw.Report = func(verb string, err error) {
		s.Report(verb, err, time.Now())
		if err == nil {
			return
		}
		if resourceNotServed(err) {
			select {
			case gone <- struct{}{}:
			default:
			}
			return
		}
		r.opt.Logger.Warn("cert-manager request failed", "source", s.Desc, "verb", verb, "err", err.Error())
	}
	s.Informer = cache.NewSharedIndexInformerWithOptions(lw, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{ObjectDescription: s.Desc})
	_ = s.Informer.SetTransform(transform)
	// Failures are reported (and logged) by lw.Report; the default handler would log them again.
	_ = s.Informer.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {})
	unwrap := func(obj any) (*entry[T], bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		e, ok := obj.(*entry[T])
		return e, ok
	}
	_, _ = s.Informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if e, ok := unwrap(obj); ok {
				r.bump(kube.Added, kind, e.Namespace, e.Name, initial)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			was, ok1 := unwrap(oldObj)
			is, ok2 := unwrap(newObj)
			if ok1 && ok2 && !same(was.V, is.V) {
				r.bump(kube.Updated, kind, is.Namespace, is.Name, false)
			}
		},
		DeleteFunc: func(obj any) {
			if e, ok := unwrap(obj); ok {
				r.bump(kube.Deleted, kind, e.Namespace, e.Name, false)
			}
		},
	})
	return s
}

// sameCertificate compares two projections, their errors by text.
func sameCertificate(a, b kube.CMCertificate) bool {
	if (a.Err == nil) != (b.Err == nil) || (a.Err != nil && a.Err.Error() != b.Err.Error()) {
		return false
	}
	a.Err, b.Err = nil, nil
	return a == b
}

// readWatched is Read once Start was called: the stores' contents, once the initial lists are done (or
// have failed), waiting at most SyncTimeout for them.
func (r *Reader) readWatched(ctx context.Context) kube.CertManager {
	wctx, cancel := context.WithTimeout(ctx, r.opt.SyncTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r.w.mu.Lock()
		checked, present, sources := r.w.checked, r.w.present, r.w.sources
		r.w.mu.Unlock()
		switch {
		case checked && !present:
			return kube.CertManager{Read: true}
		case checked && settled(sources):
			return r.snapshot(sources)
		}
		select {
		case <-wctx.Done():
			if !checked {
				return kube.CertManager{Read: true, Present: true,
					Err: fmt.Errorf("cert-manager: no answer from the API server whether cert-manager.io/v1 is served (%w)", wctx.Err())}
			}
			return r.snapshot(sources) // with an error for each informer still listing
		case <-tick.C:
		}
	}
}

// settled: every informer has listed, or its last request failed (waiting would not help).
func settled(sources []*listwatch.Source) bool {
	for _, s := range sources {
		if _, err := s.Err(); !s.Informer.HasSynced() && err == nil {
			return false
		}
	}
	return true
}

// snapshot is the stores' contents, sorted as List sorts them, with each informer's failure in
// Err.
func (r *Reader) snapshot(sources []*listwatch.Source) kube.CertManager {
	out := kube.CertManager{Read: true, Present: true}
	var errs []error
	for _, s := range sources {
		if _, err := s.Err(); err != nil {
			errs = append(errs, err)
		} else if !s.Informer.HasSynced() {
			errs = append(errs, fmt.Errorf("%s: not listed after %v: no answer from the API server", s.Desc, r.opt.SyncTimeout))
		}
	}
	// Built afresh each read: a kept sorted copy would save the sort (≈ 1 ms at 4,000 objects)
	// but hold a second copy of every projection in the live heap, which GOGC doubles in RSS.
	var lists [][]any
	nc, nr := 0, 0
	for _, s := range sources {
		l := s.Informer.GetStore().List()
		lists = append(lists, l)
		if s.Kind == "Certificate" {
			nc += len(l)
		} else {
			nr += len(l)
		}
	}
	// nil when empty, as List returns them.
	if nc > 0 {
		out.Certificates = make([]kube.CMCertificate, 0, nc)
	}
	if nr > 0 {
		out.Requests = make([]kube.CMRequest, 0, nr)
	}
	for _, l := range lists {
		for _, obj := range l {
			switch e := obj.(type) {
			case *entry[kube.CMCertificate]:
				out.Certificates = append(out.Certificates, e.V)
			case *entry[kube.CMRequest]:
				out.Requests = append(out.Requests, e.V)
			}
		}
	}
	slices.SortFunc(out.Certificates, func(a, b kube.CMCertificate) int { return compareKey(a.Namespace, a.Name, b.Namespace, b.Name) })
	slices.SortFunc(out.Requests, func(a, b kube.CMRequest) int { return compareKey(a.Namespace, a.Name, b.Namespace, b.Name) })
	// Watch events may add past what a list accepts: the same bound, the same error.
	if n := r.opt.MaxObjects; len(out.Certificates) > n || len(out.Requests) > n {
		errs = append(errs, fmt.Errorf("cert-manager: more than %d Certificates or CertificateRequests; certdrift reads at most that many", n))
		out.Certificates, out.Requests = out.Certificates[:min(n, len(out.Certificates))], out.Requests[:min(n, len(out.Requests))]
	}
	out.Err = errors.Join(errs...)
	return out
}
