package collector

import (
	"bytes"
	"crypto/x509"
	"slices"
	"testing"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/ref"
)

// TestRoundReusesUnchangedDesiredObjects: a round whose Secret did not change keeps that
// Secret's rendered object (the same value, not rendered again), one whose leaf changed under the
// same name gets a new one, and a deleted Secret's object is gone. After every round the whole
// exposition must equal that of a fresh store recording the same round, which renders everything.
func TestRoundReusesUnchangedDesiredObjects(t *testing.T) {
	obs := func(ns, name string, c *x509.Certificate) desired.Observation {
		o := desired.Observation{Ref: ref.Source{Kind: ref.Secret, Namespace: ns, Name: name}}
		if c != nil {
			// A copy of the certificate, as a new conversion of the same Secret makes: reuse must
			// follow the bytes, not the pointer.
			cc := *c
			cc.Raw = bytes.Clone(c.Raw)
			o.Items = []desired.Item{{Chain: []*x509.Certificate{&cc}}}
		}
		return o
	}
	a, b, a2 := cert("a", 30), cert("b", 40), cert("a2", 50)
	round := func(at time.Time, desired ...desired.Observation) Round {
		r := kubeRound(at, false)
		r.Inputs.Desired = desired
		return r
	}
	s := NewStore(Options{Now: clock(t0.Add(time.Hour))})
	objectOf := func(source string) *object {
		i, ok := s.objects.find(desiredKey(source))
		if !ok {
			return nil
		}
		return s.objects[i]
	}
	steps := []struct {
		name string
		r    Round
		// reused and rendered name the desired objects that must be the previous round's, or new.
		reused, rendered []string
		gone             string
		fp               map[string]string // desired fingerprints the scrape must show
	}{
		{name: "first", r: round(t0, obs("ns", "a", a), obs("ns", "b", b)), rendered: []string{"ns/a", "ns/b"},
			fp: map[string]string{"ns/a": pki.Fingerprint(a), "ns/b": pki.Fingerprint(b)}},
		{name: "unchanged", r: round(t0.Add(time.Minute), obs("ns", "a", a), obs("ns", "b", b)), reused: []string{"ns/a", "ns/b"},
			fp: map[string]string{"ns/a": pki.Fingerprint(a), "ns/b": pki.Fingerprint(b)}},
		{name: "new leaf under the same name", r: round(t0.Add(2*time.Minute), obs("ns", "a", a2), obs("ns", "b", b)),
			reused: []string{"ns/b"}, rendered: []string{"ns/a"}, fp: map[string]string{"ns/a": pki.Fingerprint(a2), "ns/b": pki.Fingerprint(b)}},
		{name: "b deleted", r: round(t0.Add(3*time.Minute), obs("ns", "a", a2)), reused: []string{"ns/a"}, gone: "ns/b",
			fp: map[string]string{"ns/a": pki.Fingerprint(a2), "ns/b": ""}},
		{name: "a loses its certificate", r: round(t0.Add(4*time.Minute), obs("ns", "a", nil)), gone: "ns/a",
			fp: map[string]string{"ns/a": ""}},
	}
	for i, st := range steps {
		prevExp := s.current()
		before := map[string]*object{}
		for _, src := range append(append([]string{}, st.reused...), st.rendered...) {
			before[src] = objectOf(src)
		}
		s.Record(st.r)
		for _, src := range st.reused {
			if o := objectOf(src); o == nil || o != before[src] {
				t.Errorf("%s: %s's object was rendered again, want it reused", st.name, src)
			}
		}
		for _, src := range st.rendered {
			if o := objectOf(src); o == nil || (before[src] != nil && o == before[src]) {
				t.Errorf("%s: %s's object was not rendered afresh", st.name, src)
			}
		}
		if st.gone != "" && objectOf(st.gone) != nil {
			t.Errorf("%s: %s's object is still exposed", st.name, st.gone)
		}
		// A round that renders nothing new keeps the exposition scrapes hold (no re-assembly);
		// any change makes a new one.
		if reusedExp := s.current() == prevExp; reusedExp != (st.name == "unchanged") && i > 0 {
			t.Errorf("%s: exposition reused = %v", st.name, reusedExp)
		}
		var got, want bytes.Buffer
		if err := s.current().writeText(&got); err != nil {
			t.Fatal(err)
		}
		oracle := NewStore(Options{Now: clock(t0.Add(time.Hour))})
		oracle.Record(st.r)
		if err := oracle.current().writeText(&want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%s: exposition differs from a store that rendered the round afresh:\n got %s\nwant %s", st.name, got.String(), want.String())
		}
		for src, fp := range st.fp {
			if got := desiredFP(got.String(), src); got != fp {
				t.Errorf("%s: desired fingerprint of %s = %q, want %q", st.name, src, got, fp)
			}
		}
	}
}

// TestSortedObjects: a round's objects come out in key order whether their keys were all in the
// last round (prev's order is reused) or some are new (sorted), and objects without rows are left
// out either way.
func TestSortedObjects(t *testing.T) {
	withRows := func(key string) *object {
		o := &object{key: key}
		o.rows = []rows{{f: certInfo}}
		return o
	}
	keys := func(os objects) []string {
		var out []string
		for _, o := range os {
			out = append(out, o.key)
		}
		return out
	}
	prev := objects{withRows("a"), withRows("c"), withRows("e")}
	for _, tc := range []struct {
		name  string
		byKey map[string]*object
		want  []string
	}{
		{"same keys", map[string]*object{"e": withRows("e"), "a": withRows("a"), "c": withRows("c")}, []string{"a", "c", "e"}},
		{"one gone, one empty", map[string]*object{"e": withRows("e"), "a": {key: "a"}}, []string{"e"}},
		{"new keys", map[string]*object{"e": withRows("e"), "b": withRows("b"), "a": withRows("a"), "f": withRows("f"), "c": {key: "c"}}, []string{"a", "b", "e", "f"}},
		{"no previous round", map[string]*object{"b": withRows("b"), "a": withRows("a")}, []string{"a", "b"}},
	} {
		p := prev
		if tc.name == "no previous round" {
			p = nil
		}
		if got := keys(sortedObjects(tc.byKey, p)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
