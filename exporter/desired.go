package exporter

import (
	"context"
	"sync"
	"time"

	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
)

// desiredQueue carries Secret changes from the informer (whose callbacks must not block) to
// the collector's desired objects, coalesced by Secret: a burst of updates to one Secret costs
// one re-render of its object, and a burst over many Secrets one assembly of the exposition.
type desiredQueue struct {
	mu      sync.Mutex
	pending map[ref.Source]kube.Change
	wake    chan struct{}
}

func newDesiredQueue() *desiredQueue {
	return &desiredQueue{pending: map[ref.Source]kube.Change{}, wake: make(chan struct{}, 1)}
}

// add queues c; only Secret changes carry certificates for the desired view (ConfigMaps hold
// CA bundles, which only the round's judgement uses).
func (q *desiredQueue) add(c kube.Change) {
	if c.Kind != ref.Secret || c.Secret == nil {
		return
	}
	q.mu.Lock()
	q.pending[ref.Source{Kind: c.Kind, Namespace: c.Namespace, Name: c.Name}] = c
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *desiredQueue) take() []kube.Change {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]kube.Change, 0, len(q.pending))
	for k, c := range q.pending {
		out = append(out, c)
		delete(q.pending, k)
	}
	return out
}

// run applies queued changes to the store until ctx ends.
func (q *desiredQueue) run(ctx context.Context, store *collector.Store) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		changes := q.take()
		if len(changes) == 0 {
			continue
		}
		store.UpdateDesired(desiredUpdates(changes), time.Now())
	}
}

// desiredUpdates converts Secret changes into the store's updates, with the same conversion a
// round's Gather uses (kube.Snapshot.LazyObservations), so both paths expose the same series.
func desiredUpdates(changes []kube.Change) []collector.DesiredUpdate {
	snap := kube.Snapshot{Secrets: make([]*kube.SecretSummary, 0, len(changes))}
	for _, c := range changes {
		snap.Secrets = append(snap.Secrets, c.Secret)
	}
	obs := snap.LazyObservations(nil) // a few Secrets: each certificate parsed once for its facts
	out := make([]collector.DesiredUpdate, len(changes))
	for i, c := range changes {
		out[i] = collector.DesiredUpdate{Observation: obs[i], Deleted: c.Op == kube.Deleted}
	}
	return out
}
