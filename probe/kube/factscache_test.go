package kube

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"math/big"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/test/certs"
)

// TestLazyObservationsLoadLikeObservations: the unparsed conversion, loaded, is the parsed one,
// and its facts are those of the parsed leaf, with a FactsCache or without.
func TestLazyObservationsLoadLikeObservations(t *testing.T) {
	ca := certs.NewCA(t)
	leaf := ca.Intermediate(t).Leaf(t, certs.WithDNSNames("a.example.com"))
	other := ca.Leaf(t, certs.WithDNSNames("b.example.com"))
	bundle := &Bundle{Certs: []Cert{{DER: ca.Cert.Raw}}}
	derOf := func(cs []*x509.Certificate) []Cert {
		var out []Cert
		for _, c := range cs {
			out = append(out, Cert{DER: c.Raw})
		}
		return out
	}
	snap := &Snapshot{Secrets: []*SecretSummary{
		{Namespace: "ns", Name: "a", Items: []ItemSummary{{CertKey: "tls.crt", KeyKey: "tls.key", CAKey: "ca.crt", Chain: derOf(leaf.Chain()),
			Key: &KeySummary{Algorithm: "ECDSA-P256", Format: "SEC1", Matches: true}, CA: bundle}}},
		{Namespace: "ns", Name: "b", Items: []ItemSummary{{CertKey: "tls.crt", CAKey: "ca.crt", Chain: derOf(other.Chain()), CA: bundle}}},
		{Namespace: "ns", Name: "broken", Items: []ItemSummary{{CertKey: "tls.crt", Chain: []Cert{{DER: []byte("not a certificate")}}}}},
	}, ConfigMaps: []ConfigMapSummary{{Namespace: "ns", Name: "roots", Bundles: []KeyBundle{{Key: "ca.crt", Bundle: bundle}}}}}
	want := snap.Observations()
	// rounds > 1: the later rounds reuse the first round's items, with the same result.
	for _, tc := range []struct {
		cache  *FactsCache
		rounds int
	}{{nil, 1}, {NewFactsCache(), 1}, {NewFactsCache(), 3}} {
		var got []desired.Observation
		for range tc.rounds {
			tc.cache.Round()
			got = snap.LazyObservations(tc.cache)
		}
		if len(got) != len(want) {
			t.Fatalf("%d observations, want %d", len(got), len(want))
		}
		for i := range want {
			for j := range want[i].Items {
				w, g := want[i].Items[j], got[i].Items[j]
				if i < 2 && g.Lazy == nil {
					t.Errorf("%s: item not kept unparsed", want[i].Ref)
				}
				if f := g.LeafFacts(); f != nil {
					if d := cmp.Diff(desired.FactsOf(w.Chain[0]), f, bigEq); d != "" {
						t.Errorf("%s: facts differ from the parsed leaf's:\n%s", want[i].Ref, d)
					}
				}
				loaded := g.Load(nil)
				if d := cmp.Diff(w, loaded, cmp.Comparer(func(a, b *x509.Certificate) bool { return bytes.Equal(a.Raw, b.Raw) }),
					cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) }),
					cmp.Comparer(func(a, b *ecdsa.PublicKey) bool { return a.Equal(b) })); d != "" {
					t.Errorf("%s: loaded item differs from Observations' (-parsed +loaded):\n%s", want[i].Ref, d)
				}
			}
		}
		if g := got[1].Items[0]; g.Lazy == nil || &g.Lazy.CA[0] != &got[0].Items[0].Lazy.CA[0] {
			t.Error("two Secrets with one bundle do not share its unparsed certificates")
		}
	}
}

var bigEq = cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })

// TestFactsCacheKeepsItems: an unchanged summary's items are converted once and shared by the
// rounds that use it; a changed Secret (a new summary) is converted afresh; a Secret converted
// later shares the bundle of one kept from before; a summary no round uses is dropped.
func TestFactsCacheKeepsItems(t *testing.T) {
	ca := certs.NewCA(t)
	bundle := &Bundle{Certs: []Cert{{DER: ca.Cert.Raw}}}
	summary := func(name, host string) *SecretSummary {
		leaf := ca.Leaf(t, certs.WithDNSNames(host))
		return &SecretSummary{Namespace: "ns", Name: name, Items: []ItemSummary{{CertKey: "tls.crt", CAKey: "ca.crt",
			Chain: []Cert{{DER: leaf.Cert.Raw}}, CA: bundle}}}
	}
	a, b := summary("a", "a.example.com"), summary("b", "b.example.com")
	c := NewFactsCache()
	first := (&Snapshot{Secrets: []*SecretSummary{a}}).LazyObservations(c)
	c.Round()
	b2 := summary("b", "b2.example.com") // b as it is after an update: another summary
	second := (&Snapshot{Secrets: []*SecretSummary{a, b, b2}}).LazyObservations(c)
	if &second[0].Items[0] != &first[0].Items[0] {
		t.Error("an unchanged summary's items were converted again")
	}
	if second[1].Items[0].LeafFacts().DNSNames[0] != "b.example.com" || second[2].Items[0].LeafFacts().DNSNames[0] != "b2.example.com" {
		t.Error("a changed Secret's new summary did not get its own items")
	}
	if &second[1].Items[0].Lazy.CA[0] != &first[0].Items[0].Lazy.CA[0] {
		t.Error("a Secret converted this round does not share the bundle of one kept from the last")
	}
	c.Round()
	(&Snapshot{Secrets: []*SecretSummary{b2}}).LazyObservations(c)
	c.Round()
	if _, ok := c.itemsOf(a); ok {
		t.Error("a summary no round used for a round is still kept")
	}
	if _, ok := c.itemsOf(b2); !ok {
		t.Error("a summary the last round used was dropped")
	}
}

// TestFactsCache: a certificate is parsed once while its summary lives; a round that does not
// use an entry drops it at the next Round; another slice with the same bytes is another entry.
func TestFactsCache(t *testing.T) {
	leaf := certs.NewCA(t).Leaf(t, certs.WithDNSNames("a.example.com"))
	c := NewFactsCache()
	der := leaf.Cert.Raw
	f1, ok1 := c.facts(der)
	f2, ok2 := c.facts(der)
	if !ok1 || !ok2 || f1 != f2 {
		t.Fatalf("the same DER twice: %p %v, %p %v; want one cached entry", f1, ok1, f2, ok2)
	}
	if f3, _ := c.facts(bytes.Clone(der)); f3 == f1 || f3.Serial.Cmp(f1.Serial) != 0 {
		t.Errorf("a copy of the DER elsewhere must be its own entry with the same facts")
	}
	c.Round()
	if f, _ := c.facts(der); f != f1 {
		t.Error("an entry used in the last round was dropped")
	}
	c.Round() // der used since the last Round: kept; the copy not
	if n := c.Len(); n != 1 {
		t.Errorf("after a round that used one of two entries: %d kept, want 1", n)
	}
	c.Round()
	c.Round()
	if n := c.Len(); n != 0 {
		t.Errorf("after rounds that used nothing: %d kept, want 0", n)
	}
	if _, ok := c.facts([]byte("not a certificate")); ok {
		t.Error("garbage DER gave facts")
	}
}
