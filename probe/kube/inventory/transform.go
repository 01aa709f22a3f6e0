package inventory

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
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
// idempotent as client-go requires. A Secret Options.Full leaves out becomes a stub.
func (inv *Inventory) transformSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	inv.stats.countSecret(string(s.Type))
	layouts, fixed := inv.layoutsFor(s.Type)
	stub := inv.opts.Full != nil && !inv.opts.Full(s.Namespace, s.Name)
	return &secretEntry{Summary: inv.summarizeSecret(s, layouts, fixed, inv.changes, stub)}, nil
}

// layoutsFor is how the informers read a Secret of type t: Options.Layouts for Opaque Secrets,
// the kubernetes.io/tls layout (with tls.crt required) for every other watched type.
func (inv *Inventory) layoutsFor(t corev1.SecretType) (layouts []Layout, fixed bool) {
	if t != corev1.SecretTypeOpaque {
		return []Layout{TLSLayout}, true
	}
	return inv.opts.Layouts, false
}

// summarizeSecret reads s with layouts and records its change in tracker. A stub is summarized
// without its items: nothing is parsed, and the change is recorded all the same (secretDigest
// needs no parsing), so that promoting it later (Promote) keeps its ChangedAt.
func (inv *Inventory) summarizeSecret(s *corev1.Secret, layouts []Layout, fixed bool, tracker *changeTracker, stub bool) *kube.SecretSummary {
	sum, d := inv.readSecret(s, layouts, fixed, stub)
	tracker.observe(trackKey{sum.Namespace, sum.Name, secretKind}, sum, &s.ObjectMeta, d, inv.opts.Now(), "f:data", "f:stringData")
	return sum
}

// readSecret summarizes s (a stub: without parsing its items) and digests what it read, without
// recording the change.
func (inv *Inventory) readSecret(s *corev1.Secret, layouts []Layout, fixed bool, stub bool) (*kube.SecretSummary, digest) {
	data := secretData{namespace: s.Namespace, name: s.Name, data: s.Data}
	refs, err := inv.parser.itemRefs(data, layouts, fixed)
	sum := &kube.SecretSummary{
		Namespace:       inv.strings.get(s.Namespace),
		Name:            s.Name,
		UID:             string(s.UID),
		Type:            inv.strings.get(string(s.Type)),
		ResourceVersion: s.ResourceVersion,
		CreatedAt:       s.CreationTimestamp.UTC(),
	}
	switch {
	case stub:
		// Only a stub that would hold something is one: Snapshot leaves out both kinds, but
		// Promote reads only stubs.
		sum.Stub = len(refs) > 0 || err != nil
	default:
		sum.Items, sum.Err = inv.parser.parseItems(data, refs, inv.opts.Now()), err
	}
	return sum, secretDigest(refs, s.Data, err)
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
	t.judge(key, rec, m, d, now, true, fields...)
}

// peek sets rec's change fields as observe does, without remembering rec: for a version read
// apart from the informer (Promote), which may be older or newer than the one the informer last
// delivered, and must not stand in for it.
func (t *changeTracker) peek(key trackKey, rec changeRecord, m *metav1.ObjectMeta, d digest, now time.Time, fields ...string) {
	t.judge(key, rec, m, d, now, false, fields...)
}

func (t *changeTracker) judge(key trackKey, rec changeRecord, m *metav1.ObjectMeta, d digest, now time.Time, record bool, fields ...string) {
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
	if record {
		t.m[key] = tracked{last: rec, digest: d, writers: writers}
	}
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

// secretDigest hashes what the inventory reads of a Secret: each item's keys and their values,
// and the error that cut the items short. It needs no parsing, so a stub (Options.Full) records
// its changes exactly as a full summary does, and a stub promoted later keeps its ChangedAt.
// PEM values are hashed without their whitespace: a certificate written again with other line
// breaks, CRLFs or a trailing newline is no change, as it was not when parsed certificates were
// hashed; a label or an annotation is none either. The tls.key value goes into this in-memory
// digest like the others (a new key is a change certdrift reads); the digest is never logged or
// exposed.
func secretDigest(refs []itemRef, data map[string][]byte, err error) digest {
	h := sha256.New()
	length := func(l int) { writeLength(h, l) }
	for _, r := range refs {
		for _, k := range [...]string{r.name, r.cert, r.key, r.ca} {
			length(len(k))
			io.WriteString(h, k)
		}
		for _, k := range [...]string{r.cert, r.key, r.ca} {
			v, ok := data[k]
			if k == "" || !ok {
				h.Write([]byte{0})
				continue
			}
			h.Write([]byte{1})
			writeValue(h, v)
		}
	}
	length(len(errString(err)))
	io.WriteString(h, errString(err))
	var sum [sha256.Size]byte
	var out digest
	copy(out[:], h.Sum(sum[:0]))
	return out
}

// writeValue writes v to h, and its length after it: a PEM value line by line without the
// whitespace around each line, any other (DER) as it is, since a space or newline byte in DER
// means something. By line rather than by byte: bytes.IndexByte finds a newline far faster than
// a byte loop, and 100,000 Secrets are some 300 MB of values.
func writeValue(h io.Writer, v []byte) {
	if !bytes.Contains(v, []byte("-----BEGIN")) {
		h.Write(v)
		writeLength(h, len(v))
		return
	}
	total := 0
	for len(v) > 0 {
		line := v
		if i := bytes.IndexByte(v, '\n'); i >= 0 {
			line, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		line = bytes.TrimSpace(line)
		h.Write(line)
		total += len(line)
	}
	writeLength(h, total)
}

func writeLength(h io.Writer, l int) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(l))
	h.Write(n[:])
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
