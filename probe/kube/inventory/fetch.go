package inventory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Reading what the informers do not watch.
//
// The inventory watches kubernetes.io/tls Secrets, Opaque Secrets only when layouts are given,
// and ConfigMaps only when asked: watching every Opaque Secret and ConfigMap of a cluster to find
// the few trust bundles among them would cost the API server and certdrift's memory what users
// hold against peer tools. But a pod's trust often comes from exactly such an object — an Opaque
// Secret holding only ca.crt projected beside the TLS Secret, Istio's "<name>-cacert", a
// ConfigMap bundle — and leaving it out would leave a CA rotation unjudged. So the Secrets and
// ConfigMaps that Envoy pods mount or name, and that the informers do not hold, are read by name
// each round (from the API server's watch cache: resourceVersion "0"), and parsed by the same
// parser with the CA-only layouts added.

// Fetch limits.
const (
	maxFetchPerRound = 512
	fetchConcurrency = 8
	fetchTimeout     = 10 * time.Second
)

// Fetch reads the referenced Secrets and ConfigMaps by name and summarizes those that hold a
// certificate or a CA bundle. The caller passes the references the inventory's Snapshot lacks;
// Fetch still leaves out what the informers' filters exclude on purpose: namespaces outside
// Options.Namespaces or in ExcludeNamespaces, Secrets of a watched type (one missing from the
// Snapshot was filtered out by the label selector, or has just been created) and Secrets the
// label selector does not match. A Secret is read with the kubernetes.io/tls layout (any type
// but Opaque) or Options.Layouts (Opaque), and CAOnlyLayouts after them. A reference that does
// not exist is left out (the audit sees a binding without its source); one that could not be
// read is a summary with Err, so the gap is reported.
func (inv *Inventory) Fetch(ctx context.Context, refs []ref.Source) kube.Snapshot {
	snap := kube.Snapshot{At: inv.opts.Now(), Synced: true}
	var todo []ref.Source
	for _, r := range refs {
		if r.Name == "" || !inv.inScope(r.Namespace) || slices.Contains(todo, r) {
			continue
		}
		todo = append(todo, r)
	}
	var mu sync.Mutex
	sem := make(chan struct{}, fetchConcurrency)
	var wg sync.WaitGroup
	for i, r := range todo {
		if i >= maxFetchPerRound {
			err := fmt.Errorf("%s %s/%s not read: more than %d unwatched Secrets and ConfigMaps are mounted or named; watch them instead (--secret-layout, --configmap-selector)",
				r.Kind, r.Namespace, r.Name, maxFetchPerRound)
			inv.addFetched(&mu, &snap, r, nil, nil, err)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			sec, cm, err := inv.fetchOne(ctx, r)
			inv.addFetched(&mu, &snap, r, sec, cm, err)
		}()
	}
	wg.Wait()
	slices.SortFunc(snap.Secrets, func(a, b *kube.SecretSummary) int { return compareKeys(a.Namespace, a.Name, b.Namespace, b.Name) })
	slices.SortFunc(snap.ConfigMaps, func(a, b kube.ConfigMapSummary) int { return compareKeys(a.Namespace, a.Name, b.Namespace, b.Name) })
	return snap
}

func (inv *Inventory) addFetched(mu *sync.Mutex, snap *kube.Snapshot, r ref.Source, sec *kube.SecretSummary, cm *kube.ConfigMapSummary, err error) {
	mu.Lock()
	defer mu.Unlock()
	switch {
	case err != nil && r.Kind == "ConfigMap":
		snap.ConfigMaps = append(snap.ConfigMaps, kube.ConfigMapSummary{Namespace: r.Namespace, Name: r.Name, Err: err})
	case err != nil:
		snap.Secrets = append(snap.Secrets, &kube.SecretSummary{Namespace: r.Namespace, Name: r.Name, Err: err})
	case sec != nil:
		snap.Secrets = append(snap.Secrets, sec)
	case cm != nil:
		snap.ConfigMaps = append(snap.ConfigMaps, *cm)
	}
}

// fetchOne reads one reference: nil summaries and no error when it does not exist, is filtered
// out, or holds no certificate or bundle.
func (inv *Inventory) fetchOne(ctx context.Context, r ref.Source) (*kube.SecretSummary, *kube.ConfigMapSummary, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	get := metav1.GetOptions{ResourceVersion: "0"}
	switch r.Kind {
	case "Secret":
		s, err := inv.client.CoreV1().Secrets(r.Namespace).Get(ctx, r.Name, get)
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		if err != nil {
			inv.log.Warn("kube inventory: read mounted Secret", "namespace", r.Namespace, "secret", r.Name, "error", err.Error())
			return nil, nil, fmt.Errorf("read Secret %s/%s: %w", r.Namespace, r.Name, err)
		}
		if slices.Contains(inv.opts.SecretTypes, string(s.Type)) || !inv.selects(s.Labels) {
			return nil, nil, nil
		}
		layouts := []Layout{TLSLayout}
		if s.Type == corev1.SecretTypeOpaque {
			layouts = slices.Clone(inv.opts.Layouts)
		}
		for _, l := range CAOnlyLayouts {
			if !slices.Contains(layouts, l) {
				layouts = append(layouts, l)
			}
		}
		sum := inv.summarizeSecret(s, layouts, false, inv.fetched, false)
		if len(sum.Items) == 0 && sum.Err == nil {
			return nil, nil, nil
		}
		return sum, nil, nil
	case "ConfigMap":
		cm, err := inv.client.CoreV1().ConfigMaps(r.Namespace).Get(ctx, r.Name, get)
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		if err != nil {
			inv.log.Warn("kube inventory: read mounted ConfigMap", "namespace", r.Namespace, "configmap", r.Name, "error", err.Error())
			return nil, nil, fmt.Errorf("read ConfigMap %s/%s: %w", r.Namespace, r.Name, err)
		}
		sum := inv.summarizeConfigMap(cm, inv.fetched)
		if len(sum.Bundles) == 0 {
			return nil, nil, nil
		}
		return nil, sum, nil
	}
	return nil, nil, nil
}

// inScope reports whether the inventory's namespace options allow ns.
func (inv *Inventory) inScope(ns string) bool {
	if ns == "" || slices.Contains(inv.opts.ExcludeNamespaces, ns) {
		return false
	}
	return len(inv.opts.Namespaces) == 0 || slices.Contains(inv.opts.Namespaces, ns)
}

// selects reports whether the Secret label selector (if any) matches.
func (inv *Inventory) selects(l map[string]string) bool {
	if inv.opts.SecretSelector == "" {
		return true
	}
	sel, err := labels.Parse(inv.opts.SecretSelector)
	return err == nil && sel.Matches(labels.Set(l))
}
