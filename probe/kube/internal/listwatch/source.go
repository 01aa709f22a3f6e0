// Package listwatch is the list/watch machinery the inventory and discovery share: a paged
// ListerWatcher that decodes protobuf pages one object at a time (liststream.go) and summarizes
// them in parallel while the GC runs eagerly (gcpace.go), informers run and awaited as a set, and
// the error that names a missing RBAC rule.
package listwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/kubeapi"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// source is one informer: one resource, one namespace (or all), one server-side filter.
type Source struct {
	Kind      string // "Secret" or "ConfigMap"
	Namespace string
	Desc      string
	Informer  cache.SharedIndexInformer

	mu      sync.Mutex
	lastErr error
	errAt   time.Time
}

func (s *Source) Report(_ string, err error, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr, s.errAt = err, now
}

func (s *Source) Err() (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errAt, s.lastErr
}

func Describe(resource, ns, fieldSel, labelSel string) string {
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
func NewClient(cfg *rest.Config, qps float32, burst int, userAgent string) (*kubeapi.Client, error) {
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

// objects turns a typed list's items into the runtime.Objects a Paged page holds.
func Objects[T any, PT interface {
	*T
	runtime.Object
}](items []T) []runtime.Object {
	out := make([]runtime.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// runSources runs the informers of an Inventory or a Discovery until ctx ends.
func Run(ctx context.Context, started *atomic.Bool, log *slog.Logger, what string, sources []*Source) error {
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
			s.Informer.RunWithContext(ctx)
		}()
	}
	log.Info(what+" started", "sources", len(sources))
	wg.Wait()
	return nil
}

// waitSources is WaitSynced for any set of sources read from the API server host.
func WaitSynced(ctx context.Context, what, host string, sources []*Source) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		synced := true
		var denied []error
		for _, s := range sources {
			if s.Informer.HasSynced() {
				continue
			}
			synced = false
			if _, err := s.Err(); err != nil && isAccessError(err) {
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
				if !s.Informer.HasSynced() {
					m := s.Desc
					if _, err := s.Err(); err != nil {
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

func SameVersion(a, b any) bool {
	type rv interface{ GetResourceVersion() string }
	x, ok1 := a.(rv)
	y, ok2 := b.(rv)
	return ok1 && ok2 && x.GetResourceVersion() == y.GetResourceVersion()
}

// entryList is what the paginated lister returns: entries already summarized, page by page.
type entryList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

// DeepCopyObject copies the list; the entries are shared (the reflector only reads them).
func (l *entryList) DeepCopyObject() runtime.Object {
	c := *l
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	c.Items = append([]runtime.Object(nil), l.Items...)
	return &c
}

// EntryMeta keeps only what the store and the reflector need (discovery's pod entries).
func EntryMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp,
	}
}

// Defaults of the inventory and discovery clients.
const (
	DefaultPageSize     = 1000
	DefaultQPS          = 50
	DefaultBurst        = 100
	protobufContentType = "application/vnd.kubernetes.protobuf"
)
