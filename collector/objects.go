package collector

import (
	"bytes"
	"cmp"
	"crypto/x509"
	"math/big"
	"slices"
	"strconv"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/probe/desired"
)

// object is the pre-rendered series of one object of one view: what kube-state-metrics keeps per
// Kubernetes object. It is immutable once built: an update builds a new one.
type object struct {
	// key orders objects and finds them again: "<view>/<name>" (see the *Key functions).
	key string
	rowSet
	// from is what a desired object was rendered from, so that the next round reuses it when its
	// source did not change (nil for the other views).
	from *desiredFrom
}

// desiredFrom is everything a desired object's series are rendered from (certSeriesSet.desired):
// per item its name, path and leaf. The leaf is kept as its DER, which is the inventory's own
// copy (x509.ParseCertificate's Raw aliases its input), so remembering it costs no certificate.
type desiredFrom struct {
	kubernetes bool
	items      []desiredFromItem
}

type desiredFromItem struct {
	name, certPath string
	leaf           []byte
}

func desiredFromOf(o desired.Observation, kubernetes bool) *desiredFrom {
	f := &desiredFrom{kubernetes: kubernetes, items: make([]desiredFromItem, 0, len(o.Items))}
	for _, it := range o.Items {
		fi := desiredFromItem{name: it.Name, certPath: it.CertPath, leaf: it.LeafDER()}
		f.items = append(f.items, fi)
	}
	return f
}

// renders reports whether o would render exactly the series f was rendered from: the same
// items with byte-identical leaves. Anything else (a new leaf under the same name, an item more
// or less) renders afresh.
func (f *desiredFrom) renders(o desired.Observation, kubernetes bool) bool {
	if f == nil || f.kubernetes != kubernetes || len(f.items) != len(o.Items) {
		return false
	}
	for i, it := range o.Items {
		fi := f.items[i]
		leaf := it.LeafDER()
		if fi.name != it.Name || fi.certPath != it.CertPath || (leaf == nil) != (fi.leaf == nil) || !bytes.Equal(fi.leaf, leaf) {
			return false
		}
	}
	return true
}

// Object keys. A desired object is one source; loaded and served objects are one Envoy each; the
// trust bundles of a view are one object (their series are per CA, counted over every bundle of
// the view); and the round's judgement (findings, bindings, coverage, reachability) is one.
func desiredKey(source string) string { return "desired/" + source }
func loadedKey(envoy string) string   { return "loaded/" + envoy }
func servedKey(envoy string) string   { return "served/" + envoy }

const (
	caDesiredKey = "ca/desired"
	caLoadedKey  = "ca/loaded"
	roundKey     = "round"
	// certManagerKey holds cert-manager's Certificates beside the views (certmanager.go).
	certManagerKey = "certmanager"
)

// objects are a generation's objects, sorted by key. A new generation is a new slice sharing the
// objects that did not change.
type objects []*object

func (os objects) find(key string) (int, bool) {
	return slices.BinarySearchFunc(os, key, func(o *object, k string) int { return cmp.Compare(o.key, k) })
}

// withDesired returns a copy of os whose desired objects of the updated sources are replaced (or
// removed). os itself is not modified: scrapes may be reading an exposition assembled from it.
func (os objects) withDesired(upds []DesiredUpdate, shard Shard, kubernetes bool) objects {
	next := slices.Clone(os)
	for _, u := range upds {
		key := desiredKey(u.Observation.Ref.String())
		var o *object
		if !u.Deleted && shard.Owns(u.Observation.Ref.Key()) {
			o = &object{key: key, from: desiredFromOf(u.Observation, kubernetes)}
			newCertSeries(&o.rowSet).desired(u.Observation, kubernetes)
			if len(o.rows) == 0 {
				o = nil
			}
		}
		i, found := next.find(key)
		switch {
		case o == nil && found:
			next = slices.Delete(next, i, i+1)
		case o != nil && found:
			next[i] = o
		case o != nil:
			next = slices.Insert(next, i, o)
		}
	}
	return next
}

// roundObjects renders every object of a round, keeping only the shard's: the desired
// certificates per source, the loaded and served ones per Envoy, the trust bundles per view, and
// the round's judgement. converging is the Tracker's count of pending rotations. A desired object
// of prev (the objects exposed now) is reused as it is when its source renders the same series:
// at 10,000 Secrets, re-rendering every unchanged one was ≈ 40% of a round's exposition work.
func roundObjects(r Round, shard Shard, converging int, prev objects) objects {
	byKey := map[string]*object{}
	obj := func(key string) *object {
		o := byKey[key]
		if o == nil {
			o = &object{key: key}
			byKey[key] = o
		}
		return o
	}
	ids := envoyIdentities(r)

	// Known certificates by serial and expiry: /certs gives neither fingerprint nor issuer, so a
	// loaded entry borrows them from the same certificate seen in another view, when there is one.
	known := knownCerts{}
	remember := known.add
	// Only /certs entries ask: without them, 10,000 Secrets need no index.
	desiredKnown := r.Inputs.Desired
	if !readsCerts(r) {
		desiredKnown = nil
	}
	for _, o := range desiredKnown {
		for _, it := range o.Items {
			switch {
			case it.Lazy != nil && len(it.Lazy.Chain) > 0:
				known.addLazy(it.Lazy.Chain[0])
			case len(it.Chain) > 0:
				remember(it.Chain[0])
			}
		}
	}
	for _, ev := range r.Inputs.Envoys {
		for _, res := range ev.Served {
			if len(res.Chain) > 0 {
				remember(res.Chain[0])
			}
		}
		if ev.Admin != nil {
			for _, sec := range ev.Admin.Secrets {
				if len(sec.Chain) > 0 {
					remember(sec.Chain[0])
				}
			}
		}
	}

	// One certSeries per object, so that a series is rendered once however often the round
	// lists it (a source bound through several paths, a context /certs lists twice).
	certs := map[string]*certSeriesSet{}
	certsOf := func(key string) *certSeriesSet {
		c := certs[key]
		if c == nil {
			c = newCertSeries(&obj(key).rowSet)
			certs[key] = c
		}
		return c
	}
	// A source listed twice in one round (it should not be) renders into one object: never into
	// a reused one, which the exposition scrapes now read.
	listed := make(map[string]int, len(r.Inputs.Desired))
	for _, o := range r.Inputs.Desired {
		listed[o.Ref.String()]++
	}
	for _, o := range r.Inputs.Desired {
		if !shard.Owns(o.Ref.Key()) {
			continue
		}
		name := o.Ref.String()
		key := desiredKey(name)
		if listed[name] == 1 {
			if i, ok := prev.find(key); ok && prev[i].from.renders(o, r.Kubernetes) {
				byKey[key] = prev[i]
				continue
			}
		}
		certsOf(key).desired(o, r.Kubernetes)
		if listed[name] == 1 {
			byKey[key].from = desiredFromOf(o, r.Kubernetes)
		}
	}
	round := obj(roundKey)
	bound := bindingsByEnvoy(r.Report.Bindings)
	for _, ev := range r.Inputs.Envoys {
		name := ev.Config.Name
		if !shard.Owns(name) {
			continue
		}
		id := ids[name]
		if ev.Admin != nil {
			envoyUp(&round.rowSet, id, name, ev.Admin.CertsErr == nil)
			certsOf(loadedKey(name)).loaded(ev.Admin, id.namespace, name, bound[name], known)
		}
		certsOf(servedKey(name)).served(ev.Served, id.namespace, name, bound[name])
	}
	desiredCAs, loadedCAs := caSeriesOf(r, shard)
	renderCAs(&obj(caDesiredKey).rowSet, desiredCAs)
	renderCAs(&obj(caLoadedKey).rowSet, loadedCAs)
	renderJudgement(&round.rowSet, r, shard, ids, converging)
	renderCertManager(&obj(certManagerKey).rowSet, r, shard)

	return sortedObjects(byKey, prev)
}

// sortedObjects are the objects of byKey that have rows, in key order. prev (objects: sorted by
// key, each key once) is the last round's: when every object with rows has its key there
// (nothing appeared, whatever changed), walking prev gives that order without sorting 10,000 keys
// again.
func sortedObjects(byKey map[string]*object, prev objects) objects {
	n := 0
	for _, o := range byKey {
		if len(o.rows) > 0 {
			n++
		}
	}
	out := make(objects, 0, n)
	for _, p := range prev {
		if o, ok := byKey[p.key]; ok && len(o.rows) > 0 {
			out = append(out, o)
		}
	}
	if len(out) == n {
		return out
	}
	out = out[:0]
	for _, o := range byKey {
		if len(o.rows) > 0 {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b *object) int { return cmp.Compare(a.key, b.key) })
	return out
}

// identity is how an Envoy is labelled.
type identity struct{ namespace, workload, pod string }

func envoyIdentities(r Round) map[string]identity {
	ids := map[string]identity{}
	for _, ev := range r.Inputs.Envoys {
		var id identity
		if p := ev.Pod; p != nil {
			id = identity{namespace: p.Namespace, workload: p.Workload, pod: p.Pod}
		}
		ids[ev.Config.Name] = id
	}
	return ids
}

func bindingsByEnvoy(bs []audit.Binding) map[string][]audit.Binding {
	m := map[string][]audit.Binding{}
	for _, b := range bs {
		m[b.Envoy] = append(m[b.Envoy], b)
	}
	return m
}

// readsCerts reports whether some Envoy of the round reported /certs contexts, the only entries
// that borrow from knownCerts.
func readsCerts(r Round) bool {
	for _, ev := range r.Inputs.Envoys {
		if ev.Admin != nil && len(ev.Admin.Contexts) > 0 {
			return true
		}
	}
	return false
}

// knownCerts are a round's certificates by serial and expiry (serialKey), for /certs entries,
// which carry neither fingerprint nor issuer, to borrow them from the same certificate seen in
// another view. A later add of the same key replaces the earlier one. A desired certificate kept
// unparsed (desired.Lazy) is parsed only when an entry borrows from it.
type knownCerts map[string]*knownCert

type knownCert struct {
	x   *x509.Certificate
	der []byte // unparsed until get
}

func (k knownCerts) add(c *x509.Certificate) {
	if c != nil && c.SerialNumber != nil {
		k[serialKey(c.SerialNumber, c.NotAfter)] = &knownCert{x: c}
	}
}

func (k knownCerts) addLazy(c desired.Cert) {
	if c.Facts != nil && c.Serial != nil {
		k[serialKey(c.Serial, c.NotAfter)] = &knownCert{der: c.DER}
	}
}

// get is the certificate with that serial and expiry, nil when none is known.
func (k knownCerts) get(serial *big.Int, notAfter time.Time) *x509.Certificate {
	e := k[serialKey(serial, notAfter)]
	if e == nil {
		return nil
	}
	if e.x == nil && e.der != nil {
		x, err := x509.ParseCertificate(e.der)
		if err != nil {
			e.der = nil // parsed when the Secret was read; unreachable, but never a panic
			return nil
		}
		e.x, e.der = x, nil
	}
	return e.x
}

func serialKey(serial *big.Int, notAfter time.Time) string {
	return serial.Text(16) + "|" + strconv.FormatInt(notAfter.Unix(), 10)
}

func joinKey(labels []string) string {
	n := 0
	for _, l := range labels {
		n += len(l) + 1
	}
	b := make([]byte, 0, n)
	for _, l := range labels {
		b = append(b, l...)
		b = append(b, 0)
	}
	return string(b)
}
