package inventory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
)

// Promoting stubs.
//
// A sharded serve keeps full summaries only of the Secrets its shard owns (Options.Full): every
// replica lists every Secret, but parsing and keeping all their certificates made each replica
// nearly as large as one unsharded process (docs/benchmarks.md, issue 20). A round of a shard
// still judges some Secrets it does not own: those in a namespace where it has an Envoy pod and
// those its pods or pairings name (gather's shardSources). Promote reads those by name, from the
// API server's watch cache, and keeps them while their stub is unchanged, so a round in which
// nothing changed asks the API server nothing.

// promotedCache keeps the full summaries Promote read, by Secret.
type promotedCache struct {
	mu sync.Mutex
	m  map[trackKey]*kube.SecretSummary
}

// Promote returns snap (a Snapshot) with the full summaries of the stubs in namespaces or named by
// refs added, sorted as Snapshot sorts. A stub whose Secret could not be read is a summary with
// Err, so the gap is reported; one deleted since is left out, as the informer will drop it. The
// summaries keep the ChangedAt the informer recorded for the version they hold. prune drops the
// kept summaries this call did not need: a fleet round passes true, a narrowed round (one pod's
// post-check) false, so as not to drop what the next fleet round needs. Without Options.Full
// there are no stubs and snap is returned as it is.
func (inv *Inventory) Promote(ctx context.Context, snap kube.Snapshot, namespaces []string, refs []ref.Source, prune bool) kube.Snapshot {
	if inv.opts.Full == nil {
		return snap
	}
	stubs := inv.neededStubs(namespaces, refs)
	out := make([]*kube.SecretSummary, len(stubs))
	var todo []int
	inv.promoted.mu.Lock()
	if inv.promoted.m == nil {
		inv.promoted.m = map[trackKey]*kube.SecretSummary{}
	}
	for i, st := range stubs {
		if kept := inv.promoted.m[keyOf(st)]; kept != nil && kept.UID == st.UID && kept.ResourceVersion == st.ResourceVersion {
			out[i] = kept
			continue
		}
		todo = append(todo, i)
	}
	inv.promoted.mu.Unlock()

	sem := make(chan struct{}, fetchConcurrency)
	var wg sync.WaitGroup
	for _, i := range todo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i] = inv.promoteOne(ctx, stubs[i])
		})
	}
	wg.Wait()

	inv.promoted.mu.Lock()
	needed := make(map[trackKey]bool, len(stubs))
	for i, st := range stubs {
		needed[keyOf(st)] = true
		if out[i] != nil && out[i].Err == nil {
			inv.promoted.m[keyOf(st)] = out[i]
		}
	}
	if prune {
		maps.DeleteFunc(inv.promoted.m, func(k trackKey, _ *kube.SecretSummary) bool { return !needed[k] })
	}
	inv.promoted.mu.Unlock()

	added := false
	for _, sum := range out {
		if sum != nil && (len(sum.Items) > 0 || sum.Err != nil) {
			snap.Secrets = append(snap.Secrets, sum)
			added = true
		}
	}
	if added {
		slices.SortFunc(snap.Secrets, func(a, b *kube.SecretSummary) int {
			return compareKeys(a.Namespace, a.Name, b.Namespace, b.Name)
		})
	}
	return snap
}

// keyOf is a summary's key in the change tracker and the promoted cache.
func keyOf(s *kube.SecretSummary) trackKey { return trackKey{s.Namespace, s.Name, secretKind} }

// neededStubs lists the stubs in namespaces or named by refs.
func (inv *Inventory) neededStubs(namespaces []string, refs []ref.Source) []*kube.SecretSummary {
	if len(namespaces) == 0 && len(refs) == 0 {
		return nil
	}
	inNS := make(map[string]bool, len(namespaces))
	for _, ns := range namespaces {
		inNS[ns] = true
	}
	named := make(map[trackKey]bool, len(refs))
	for _, r := range refs {
		if r.Kind == ref.Secret {
			named[trackKey{r.Namespace, r.Name, secretKind}] = true
		}
	}
	var out []*kube.SecretSummary
	for _, s := range inv.sources {
		if s.Kind != "Secret" {
			continue
		}
		for _, obj := range s.Informer.GetStore().List() {
			if e, ok := obj.(*secretEntry); ok && e.Summary.Stub && (inNS[e.Summary.Namespace] || named[keyOf(e.Summary)]) {
				out = append(out, e.Summary)
			}
		}
	}
	return out
}

// promoteOne reads the Secret of stub st by name: a version at least as new as the stub's, from
// the API server's watch cache. nil when it no longer exists.
func (inv *Inventory) promoteOne(ctx context.Context, st *kube.SecretSummary) *kube.SecretSummary {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	inv.stats.promoteRequests.Add(1)
	s, err := inv.client.CoreV1().Secrets(st.Namespace).Get(ctx, st.Name, metav1.GetOptions{ResourceVersion: st.ResourceVersion})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		inv.log.Warn("kube inventory: read Secret for this shard", "namespace", st.Namespace, "secret", st.Name, "error", err.Error())
		return &kube.SecretSummary{Namespace: st.Namespace, Name: st.Name, UID: st.UID, Type: st.Type,
			Err: fmt.Errorf("read Secret %s/%s: %w", st.Namespace, st.Name, err)}
	}
	layouts, fixed := inv.layoutsFor(s.Type)
	sum, d := inv.readSecret(s, layouts, fixed, false)
	// Peeked, not observed: the version read here may be newer (or, behind a lagging API
	// server, older) than the one the informer last delivered, which stays the tracker's record.
	// When both are the same, as they are but in a race, the digest matches and ChangedAt is the
	// informer's.
	inv.changes.peek(keyOf(sum), sum, &s.ObjectMeta, d, inv.opts.Now(), "f:data", "f:stringData")
	return sum
}
