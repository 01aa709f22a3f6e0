package collector

import (
	"cmp"
	"crypto/x509"
	"math/big"
	"slices"
	"strconv"
	"time"

	"github.com/certdrift/certdrift/audit"
)

// object is the pre-rendered series of one object of one view: what kube-state-metrics keeps per
// Kubernetes object. It is immutable once built: an update builds a new one.
type object struct {
	// key orders objects and finds them again: "<view>/<name>" (see the *Key functions).
	key string
	rowSet
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
			o = &object{key: key}
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
// the round's judgement. converging is the Tracker's count of pending rotations.
func roundObjects(r Round, shard Shard, converging int) objects {
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
	known := map[string]*x509.Certificate{}
	remember := func(c *x509.Certificate) {
		if c != nil && c.SerialNumber != nil {
			known[serialKey(c.SerialNumber, c.NotAfter)] = c
		}
	}
	for _, o := range r.Inputs.Desired {
		for _, it := range o.Items {
			if len(it.Chain) > 0 {
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
	for _, o := range r.Inputs.Desired {
		if shard.Owns(o.Ref.Key()) {
			certsOf(desiredKey(o.Ref.String())).desired(o, r.Kubernetes)
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

	out := make(objects, 0, len(byKey))
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
