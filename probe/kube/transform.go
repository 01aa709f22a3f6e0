package kube

import (
	"crypto/sha256"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// transformSecret is the informer transform for Secrets: it replaces each Secret with a
// secretEntry. It runs once per add/update/delete event and once per listed Secret; entries that
// were already summarized (a list page, see pagedLW) pass through unchanged, which makes it
// idempotent as client-go requires.
func (inv *Inventory) transformSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	inv.stats.countSecret(string(s.Type))
	layouts, fixed := inv.opts.Layouts, false
	if s.Type != corev1.SecretTypeOpaque {
		layouts, fixed = []Layout{TLSLayout}, true
	}
	now := inv.opts.Now()
	items, err := inv.parser.items(secretData{namespace: s.Namespace, name: s.Name, data: s.Data}, layouts, fixed, now)
	sum := &SecretSummary{
		Namespace:       s.Namespace,
		Name:            s.Name,
		UID:             s.UID,
		Type:            string(s.Type),
		ResourceVersion: s.ResourceVersion,
		CreatedAt:       s.CreationTimestamp.UTC(),
		Items:           items,
		Err:             err,
	}
	sum.ChangedAt, sum.ChangedBy, sum.ChangedHow = inv.changes.observe("secret", &s.ObjectMeta, secretDigest(sum), now, "f:data", "f:stringData")
	return &secretEntry{ObjectMeta: entryMeta(&s.ObjectMeta), Summary: sum}, nil
}

// transformConfigMap is transformSecret's counterpart for ConfigMaps.
func (inv *Inventory) transformConfigMap(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	inv.stats.countConfigMap()
	now := inv.opts.Now()
	sum := &ConfigMapSummary{
		Namespace:       cm.Namespace,
		Name:            cm.Name,
		UID:             cm.UID,
		ResourceVersion: cm.ResourceVersion,
		CreatedAt:       cm.CreationTimestamp.UTC(),
		Bundles:         inv.parser.configMapBundles(cm.Namespace, cm.Name, cm.Data),
	}
	sum.ChangedAt, sum.ChangedBy, sum.ChangedHow = inv.changes.observe("configmap", &cm.ObjectMeta, configMapDigest(sum), now, "f:data", "f:binaryData")
	return &configMapEntry{ObjectMeta: entryMeta(&cm.ObjectMeta), Summary: sum}, nil
}

// changeTracker remembers, per object, the digest of what was parsed and when it last changed,
// so that an update which leaves the certificates alone (a label, an annotation) keeps its
// ChangedAt, and a data change without a usable managedFields stamp gets the time certdrift saw
// it.
type changeTracker struct {
	mu sync.Mutex
	m  map[string]changeState // "kind/namespace/name"
}

type changeState struct {
	uid     types.UID
	digest  [32]byte
	at      time.Time
	by      string
	how     ChangedHow
	writers []writerStamp
}

func newChangeTracker() *changeTracker { return &changeTracker{m: map[string]changeState{}} }

func (t *changeTracker) observe(kind string, m *metav1.ObjectMeta, digest [32]byte, now time.Time, fields ...string) (time.Time, string, ChangedHow) {
	key := kind + "/" + m.Namespace + "/" + m.Name
	writers := dataWriters(m.ManagedFields, fields...)
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, known := t.m[key]
	var prevWriters []writerStamp
	if known && prev.uid == m.UID {
		prevWriters = prev.writers
	}
	w, mfOK := latestWriter(writers, prevWriters)
	mgr, mfAt := w.manager, w.at
	var st changeState
	switch {
	case known && prev.uid == m.UID && prev.digest == digest:
		st = prev // nothing certdrift reads changed
	case known && prev.uid == m.UID:
		// managedFields stamps have one-second resolution: a stamp that is not after the last
		// change cannot be this change's, so the time it was seen is the better answer.
		if mfOK && mfAt.After(prev.at) {
			st = changeState{at: mfAt.UTC(), by: mgr, how: ChangedManagedFields}
		} else {
			st = changeState{at: now.UTC(), by: mgr, how: ChangedObserved}
		}
	case mfOK:
		st = changeState{at: mfAt.UTC(), by: mgr, how: ChangedManagedFields}
	default:
		st = changeState{at: m.CreationTimestamp.UTC(), how: ChangedCreated}
	}
	st.uid, st.digest, st.writers = m.UID, digest, writers
	t.m[key] = st
	return st.at, st.by, st.how
}

// forget drops the state of a deleted object, unless the name already belongs to a new object.
func (t *changeTracker) forget(kind, namespace, name string, uid types.UID) {
	key := kind + "/" + namespace + "/" + name
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.m[key]; ok && st.uid == uid {
		delete(t.m, key)
	}
}

// secretDigest hashes what the inventory reads from a Secret: item names, keys, fingerprints,
// key facts and errors.
func secretDigest(s *SecretSummary) [32]byte {
	h := sha256.New()
	w := func(parts ...string) {
		for _, p := range parts {
			io.WriteString(h, p)
			h.Write([]byte{0})
		}
	}
	for i := range s.Items {
		it := &s.Items[i]
		w("item", it.Name, it.CertKey, it.KeyKey, it.CAKey, errString(it.ChainErr), errString(it.KeyErr), errString(it.CAErr))
		for _, c := range it.Chain {
			w(c.FingerprintSHA256)
		}
		if it.Key != nil {
			w("key", it.Key.Algorithm, it.Key.Format, boolString(it.Key.Matches))
		}
		if it.CA != nil {
			for _, c := range it.CA.Certs {
				w("ca", c.FingerprintSHA256)
			}
		}
	}
	w(errString(s.Err))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func configMapDigest(c *ConfigMapSummary) [32]byte {
	h := sha256.New()
	for _, b := range c.Bundles {
		io.WriteString(h, b.Key+"\x00"+errString(b.Err)+"\x00")
		if b.Bundle != nil {
			for _, cert := range b.Bundle.Certs {
				io.WriteString(h, cert.FingerprintSHA256+"\x00")
			}
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
