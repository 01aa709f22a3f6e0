package audit

import (
	"math/big"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/test/certs"
)

// lazyInputs is in with every desired item's certificates unparsed (desired.Lazy), as
// probe/kube hands them to a round: the DER, the facts, the public key left to Load when it is
// the leaf's own, and one shared slice per shared bundle.
func lazyInputs(in Inputs) Inputs {
	in.Desired = lazyDesired(in.Desired)
	return in
}

func lazyDesired(obs []desired.Observation) []desired.Observation { return desired.Unparsed(obs) }

// checkLazyAlike fails t when in judged with its certificates unparsed gives another report than
// want, in's report with them parsed.
func checkLazyAlike(t *testing.T, in Inputs, policy config.Policy, at time.Time, want Report) {
	t.Helper()
	got := Run(lazyInputs(in), policy, at)
	if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("unparsed desired certificates (desired.Lazy) judged differently (-parsed +unparsed):\n%s", d)
	}
}

// TestLazyIsNeverParsedWhenRemembered: a round in which an unparsed desired certificate is
// remembered clean judges its expiry from the facts and parses nothing; a changed Secret (same
// name, new content) is judged again, and so is every Secret after a policy change.
func TestLazyIsNeverParsedWhenRemembered(t *testing.T) {
	f := newFixture(t)
	ca := f.ca.Cert
	round := func(m *Memo, policy config.Policy, at time.Time, obs ...desired.Observation) (Report, MemoStats) {
		in := Inputs{Desired: lazyDesired(obs), Config: &config.Config{}, Memo: m}
		r := Run(in, policy, at)
		want := Run(Inputs{Desired: obs, Config: &config.Config{}}, policy, at)
		if d := cmp.Diff(want, r, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("with a memo and unparsed certificates the report differs (-parsed, no memo +unparsed, memo):\n%s", d)
		}
		return r, m.Stats()
	}
	m := NewMemo()
	a, b := kubeDesired("ns/a", f.cur, now, ca), kubeDesired("ns/b", f.other, now, ca)
	if _, st := round(m, config.DefaultPolicy, now, a, b); st.Misses != 2 || st.Entries != 2 {
		t.Fatalf("first round: %+v, want both judged and remembered", st)
	}
	// The same content again (a new resourceVersion with the same data is the same thing here).
	if _, st := round(m, config.DefaultPolicy, now.Add(time.Minute), a, b); st.Hits != 2 || st.Misses != 0 {
		t.Fatalf("unchanged round: %+v, want both reused", st)
	}
	// ns/a rewritten under the same name with a leaf its ca.crt does not sign.
	r, st := round(m, config.DefaultPolicy, now.Add(2*time.Minute), kubeDesired("ns/a", f.fromCA2, now.Add(time.Minute), ca), b)
	if st.Hits != 1 || st.Misses != 1 || !hasCode(r, CABundleGap, "ns/a") {
		t.Fatalf("changed Secret: %+v, findings %+v; want ns/a judged again with CA_BUNDLE_GAP, ns/b reused", st, r.Findings)
	}
	// A policy change re-judges everything: RSA keys under 4096 bits are now weak.
	strict := config.DefaultPolicy
	strict.MinRSABits = 4096
	weak := kubeDesired("ns/w", f.weak, now, ca)
	round(m, config.DefaultPolicy, now.Add(3*time.Minute), a, b, weak)
	if _, st := round(m, config.DefaultPolicy, now.Add(4*time.Minute), a, b, weak); st.Hits != 2 {
		t.Fatalf("before the policy change: %+v, want the two clean Secrets reused (ns/w has a finding, never remembered)", st)
	}
	if _, st := round(m, strict, now.Add(5*time.Minute), a, b, weak); st.Hits != 0 || st.Misses != 3 {
		t.Fatalf("after the policy change: %+v, want every Secret judged again", st)
	}
}

func hasCode(r Report, c Code, source string) bool {
	for _, f := range r.Findings {
		if f.Code == c && f.Subject.Source == source {
			return true
		}
	}
	return false
}

// TestLazyFactsMatchTheCertificate: the facts kept of a certificate give exactly what its parsed
// form gives the checks that read them.
func TestLazyFactsMatchTheCertificate(t *testing.T) {
	ca := certs.NewCA(t)
	for name, leaf := range map[string]*certs.Leaf{
		"DNS":  ca.Leaf(t, certs.WithDNSNames("a.example.com", "*.b.example.com")),
		"CN":   ca.Leaf(t, certs.WithCommonName("only-cn")),
		"None": ca.Leaf(t),
	} {
		c := leaf.Cert
		dc := desired.Cert{DER: c.Raw, Facts: desired.FactsOf(c)}
		if d := cmp.Diff(validityOf(c), validityOfFacts(dc), cmp.AllowUnexported(validity{}), cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); d != "" {
			t.Errorf("%s: validity from facts differs (-parsed +facts):\n%s", name, d)
		}
		for _, host := range []string{"a.example.com", "x.b.example.com", "only-cn", "c.example.com"} {
			if (c.VerifyHostname(host) == nil) != (dc.Host().VerifyHostname(host) == nil) {
				t.Errorf("%s: VerifyHostname(%q) differs between the certificate and its facts", name, host)
			}
		}
	}
}
