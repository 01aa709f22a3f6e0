package inventory

import (
	"crypto/sha256"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/certdrift/certdrift/probe/kube"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	return &secretEntry{Summary: inv.summarizeSecret(s, layouts, fixed, inv.changes)}, nil
}

// summarizeSecret parses s with layouts and records its change in tracker.
func (inv *Inventory) summarizeSecret(s *corev1.Secret, layouts []Layout, fixed bool, tracker *changeTracker) *kube.SecretSummary {
	now := inv.opts.Now()
	items, err := inv.parser.items(secretData{namespace: s.Namespace, name: s.Name, data: s.Data}, layouts, fixed, now)
	sum := &kube.SecretSummary{
		Namespace:       inv.strings.get(s.Namespace),
		Name:            s.Name,
		UID:             string(s.UID),
		Type:            inv.strings.get(string(s.Type)),
		ResourceVersion: s.ResourceVersion,
		CreatedAt:       s.CreationTimestamp.UTC(),
		Items:           items,
		Err:             err,
	}
	tracker.observe(trackKey{sum.Namespace, sum.Name, secretKind}, sum, &s.ObjectMeta, secretDigest(sum), now, "f:data", "f:stringData")
	return sum
}

// transformConfigMap is transformSecret's counterpart for ConfigMaps.
func (inv *Inventory) transformConfigMap(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	inv.stats.countConfigMap()
	return &configMapEntry{Summary: inv.summarizeConfigMap(cm, inv.changes)}, nil
}

// summarizeConfigMap parses cm's bundles and records its change in tracker.
func (inv *Inventory) summarizeConfigMap(cm *corev1.ConfigMap, tracker *changeTracker) *kube.ConfigMapSummary {
	now := inv.opts.Now()
	sum := &kube.ConfigMapSummary{
		Namespace:       inv.strings.get(cm.Namespace),
		Name:            cm.Name,
		UID:             string(cm.UID),
		ResourceVersion: cm.ResourceVersion,
		CreatedAt:       cm.CreationTimestamp.UTC(),
		Bundles:         inv.parser.configMapBundles(cm.Namespace, cm.Name, cm.Data),
	}
	tracker.observe(trackKey{sum.Namespace, sum.Name, configMapKind}, sum, &cm.ObjectMeta, configMapDigest(sum), now, "f:data", "f:binaryData")
	return sum
}

// changeTracker remembers, per object, the digest of what was parsed and when it last changed,
// so that an update which leaves the certificates alone (a label, an annotation) keeps its
// ChangedAt, and a data change without a usable managedFields stamp gets the time certdrift saw
// it.
//
// It holds one entry per Secret for the life of the process, so its layout is kept small: the
// key is made of the summary's own strings, the UID and the change time are read from the last
// summary rather than copied, the digest is truncated, and writer stamps are whole seconds with
// interned manager names.
type changeTracker struct {
	mu      sync.Mutex
	m       map[trackKey]tracked
	strings *interner
}

type trackKey struct {
	namespace, name string
	kind            objectKind
}

type objectKind uint8

const (
	secretKind objectKind = iota + 1
	configMapKind
)

// tracked is what the tracker keeps of the last version of an object it saw.
type tracked struct {
	last    changeRecord
	digest  digest
	writers []writerStamp
}

// changeRecord is a *kube.SecretSummary or a *kube.ConfigMapSummary: a summary whose change
// fields the tracker reads and sets (changesOf).
type changeRecord any

// changesOf returns the change fields of a changeRecord.
func changesOf(r changeRecord) (uid string, at *time.Time, by *string, how *kube.ChangedHow) {
	switch s := r.(type) {
	case *kube.SecretSummary:
		return s.UID, &s.ChangedAt, &s.ChangedBy, &s.ChangedHow
	case *kube.ConfigMapSummary:
		return s.UID, &s.ChangedAt, &s.ChangedBy, &s.ChangedHow
	}
	panic(fmt.Sprintf("change tracker: %T is no summary", r))
}

// digest is a truncated SHA-256 of what the inventory read from an object: 128 bits tell
// "changed" from "unchanged" as well as 256 would, in half the memory.
type digest [16]byte

func newChangeTracker(strings *interner) *changeTracker {
	return &changeTracker{m: map[trackKey]tracked{}, strings: strings}
}

// observe sets rec's ChangedAt, ChangedBy and ChangedHow (rec is the new summary of the object
// m describes, whose key is built from rec's strings so that the tracker shares them) and
// remembers rec as the object's last version.
func (t *changeTracker) observe(key trackKey, rec changeRecord, m *metav1.ObjectMeta, d digest, now time.Time, fields ...string) {
	writers := dataWriters(m.ManagedFields, t.strings, fields...)
	uid, at, by, how := changesOf(rec)
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, known := t.m[key]
	var prevUID string
	var prevAt *time.Time
	var prevBy *string
	var prevHow *kube.ChangedHow
	if known {
		prevUID, prevAt, prevBy, prevHow = changesOf(prev.last)
	}
	known = known && prevUID == uid
	var prevWriters []writerStamp
	if known {
		prevWriters = prev.writers
	}
	w, mfOK := latestWriter(writers, prevWriters)
	mgr, mfAt := w.manager, w.time()
	switch {
	case known && prev.digest == d:
		*at, *by, *how = *prevAt, *prevBy, *prevHow // nothing certdrift reads changed
	case known:
		// managedFields stamps have one-second resolution: a stamp that is not after the last
		// change cannot be this change's, so the time it was seen is the better answer.
		if mfOK && mfAt.After(*prevAt) {
			*at, *by, *how = mfAt, mgr, kube.ChangedManagedFields
		} else {
			*at, *by, *how = now.UTC(), mgr, kube.ChangedObserved
		}
	case mfOK:
		*at, *by, *how = mfAt, mgr, kube.ChangedManagedFields
	default:
		*at, *by, *how = m.CreationTimestamp.UTC(), "", kube.ChangedCreated
	}
	t.m[key] = tracked{last: rec, digest: d, writers: writers}
}

// forget drops the state of a deleted object, unless the name already belongs to a new object.
func (t *changeTracker) forget(kind objectKind, namespace, name string, uid string) {
	key := trackKey{namespace: namespace, name: name, kind: kind}
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.m[key]; ok {
		if last, _, _, _ := changesOf(st.last); last == uid {
			delete(t.m, key)
		}
	}
}

// secretDigest hashes what the inventory reads from a Secret: item names, keys, certificates,
// key facts and errors.
func secretDigest(s *kube.SecretSummary) digest {
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
			h.Write(c.DER)
			h.Write([]byte{0})
		}
		if it.Key != nil {
			w("key", it.Key.Algorithm, it.Key.Format, boolString(it.Key.Matches))
		}
		if it.CA != nil {
			for _, c := range it.CA.Certs {
				w("ca")
				h.Write(c.DER)
				h.Write([]byte{0})
			}
		}
	}
	w(errString(s.Err))
	var sum [sha256.Size]byte
	var out digest
	copy(out[:], h.Sum(sum[:0]))
	return out
}

func configMapDigest(c *kube.ConfigMapSummary) digest {
	h := sha256.New()
	for _, b := range c.Bundles {
		io.WriteString(h, b.Key+"\x00"+errString(b.Err)+"\x00")
		if b.Bundle != nil {
			for _, cert := range b.Bundle.Certs {
				h.Write(cert.DER)
				h.Write([]byte{0})
			}
		}
	}
	var sum [sha256.Size]byte
	var out digest
	copy(out[:], h.Sum(sum[:0]))
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
