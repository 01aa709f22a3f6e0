package audit

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/test/certs"
)

// TestMemoNeverHidesAChange runs sequences of rounds through one Memo and checks every round's
// report against a Run without one: the memo may skip work, never change a verdict. Each case
// also names the finding its last round must show, so that a memo which hid the change (keyed by
// name, say, or kept past a threshold) fails here rather than passing on two empty reports.
func TestMemoNeverHidesAChange(t *testing.T) {
	f := newFixture(t)
	ca := f.ca.Cert
	// A leaf 40 days from expiry: clean now, EXPIRING after 38 days (2 days left: within the
	// policy's durations and, where EXPIRING also follows the lifetime, within 8% of it).
	forty := f.ca.Leaf(t, certs.WithCommonName("forty"), certs.WithDNSNames("forty.example.com"),
		certs.WithValidity(now.Add(-time.Hour), now.Add(40*24*time.Hour)))
	// A CA that expires an hour from now, and a leaf it signed that outlives it.
	shortCA := certs.NewCA(t, certs.WithCommonName("short-ca"), certs.WithValidity(now.Add(-time.Hour), now.Add(time.Hour)))
	shortLeaf := shortCA.Leaf(t, certs.WithCommonName("short"), certs.WithDNSNames("short.example.com"),
		certs.WithValidity(now.Add(-time.Hour), now.Add(90*24*time.Hour)))
	withKey := func(o desired.Observation, pub any) desired.Observation {
		o.Items = append([]desired.Item(nil), o.Items...)
		o.Items[0].Key = &pki.KeyInfo{Public: pub, Algorithm: "ECDSA", Format: "SEC1"}
		o.Items[0].KeyPath = "ns/a/tls.key"
		return o
	}
	type round struct {
		at      time.Time
		desired []desired.Observation
	}
	cases := map[string]struct {
		reason string
		rounds []round
		// want is a finding code the last round must report for source src ("" for none).
		want Code
		src  string
		// hits is how many desired certificates the last round must have found clean in the memo.
		hits int
	}{
		"Unchanged": {
			reason: "nothing changed: every certificate is reused, the report is the same",
			rounds: []round{
				{now, []desired.Observation{kubeDesired("ns/a", f.cur, now, ca), kubeDesired("ns/b", f.other, now, ca)}},
				{now.Add(time.Minute), []desired.Observation{kubeDesired("ns/a", f.cur, now, ca), kubeDesired("ns/b", f.other, now, ca)}},
			},
			hits: 2,
		},
		"ContentChangesUnderTheSameName": {
			reason: "ns/a now holds a leaf its ca.crt does not sign: judged again",
			rounds: []round{
				{now, []desired.Observation{kubeDesired("ns/a", f.cur, now, ca), kubeDesired("ns/b", f.other, now, ca)}},
				{now.Add(time.Minute), []desired.Observation{kubeDesired("ns/a", f.fromCA2, now, ca), kubeDesired("ns/b", f.other, now, ca)}},
			},
			want: CABundleGap, src: "ns/a", hits: 1,
		},
		"KeyChangesLeafDoesNot": {
			reason: "same tls.crt, another tls.key: the key is part of what was judged",
			rounds: []round{
				{now, []desired.Observation{withKey(kubeDesired("ns/a", f.cur, now, ca), f.cur.Cert.PublicKey)}},
				{now.Add(time.Minute), []desired.Observation{withKey(kubeDesired("ns/a", f.cur, now, ca), f.other.Cert.PublicKey)}},
			},
			want: KeyMismatch, src: "ns/a",
		},
		"BundleChanges": {
			reason: "same leaf, its ca.crt replaced by another CA's",
			rounds: []round{
				{now, []desired.Observation{kubeDesired("ns/a", f.cur, now, ca)}},
				{now.Add(time.Minute), []desired.Observation{kubeDesired("ns/a", f.cur, now, f.ca2.Cert)}},
			},
			want: CABundleGap, src: "ns/a",
		},
		"TimeCrossesTheExpiringThreshold": {
			reason: "unchanged content, but 38 days later the leaf is about to expire: the rest of the verdict is reused, expiry is judged every round",
			rounds: []round{
				{now, []desired.Observation{kubeDesired("ns/a", forty, now, ca)}},
				{now.Add(time.Hour), []desired.Observation{kubeDesired("ns/a", forty, now, ca)}},
				{now.Add(38 * 24 * time.Hour), []desired.Observation{kubeDesired("ns/a", forty, now, ca)}},
			},
			want: Expiring, src: "ns/a", hits: 1,
		},
		"DeduplicatedExpiry": {
			reason: "ns/b holds the certificate ns/a was reported for; with ns/a gone, ns/b reports it",
			rounds: []round{
				{now, []desired.Observation{kubeDesired("ns/a", f.soon, now, ca), kubeDesired("ns/b", f.soon, now, ca)}},
				{now.Add(time.Minute), []desired.Observation{kubeDesired("ns/b", f.soon, now, ca)}},
			},
			want: Expiring, src: "ns/b", hits: 1,
		},
		"BundleCAExpires": {
			reason: "unchanged content, but the CA in ca.crt expires: the bundle's verdict is judged again",
			rounds: []round{
				{now, []desired.Observation{kubeDesired("ns/a", shortLeaf, now, shortCA.Cert)}},
				{now.Add(30 * time.Minute), []desired.Observation{kubeDesired("ns/a", shortLeaf, now, shortCA.Cert)}},
				{now.Add(2 * time.Hour), []desired.Observation{kubeDesired("ns/a", shortLeaf, now, shortCA.Cert)}},
			},
			want: CABundleGap, src: "ns/a",
		},
		"RenamedSource": {
			reason: "the same Secret data under a new name is a new verdict (its findings carry the name)",
			rounds: []round{
				{now, []desired.Observation{kubeDesired("ns/a", f.fromCA2, now, ca)}},
				{now.Add(time.Minute), []desired.Observation{kubeDesired("ns/c", f.fromCA2, now, ca)}},
			},
			want: CABundleGap, src: "ns/c",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m, lm := NewMemo(), NewMemo()
			var last Report
			for i, r := range tc.rounds {
				in := Inputs{Desired: r.desired, Config: &config.Config{}}
				want := Run(in, config.DefaultPolicy, r.at)
				in.Memo = m
				got := Run(in, config.DefaultPolicy, r.at)
				if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
					t.Fatalf("%s\nround %d: report with the memo differs from without (-without +with):\n%s", tc.reason, i+1, d)
				}
				// The same rounds with the certificates unparsed, as the Kubernetes mode hands them.
				lin := lazyInputs(in)
				lin.Memo = lm
				if d := cmp.Diff(want, Run(lin, config.DefaultPolicy, r.at), cmpopts.EquateEmpty()); d != "" {
					t.Fatalf("%s\nround %d: unparsed certificates with a memo judged differently (-parsed, no memo +unparsed, memo):\n%s", tc.reason, i+1, d)
				}
				last = got
			}
			if st := m.Stats(); st.Hits != tc.hits {
				t.Errorf("%s\nlast round reused %d clean verdicts, want %d (%+v)", tc.reason, st.Hits, tc.hits, st)
			}
			if st := lm.Stats(); st.Hits != tc.hits {
				t.Errorf("%s\nunparsed: last round reused %d clean verdicts, want %d (%+v)", tc.reason, st.Hits, tc.hits, st)
			}
			if tc.want == "" {
				if len(last.Findings) != 0 {
					t.Errorf("%s\nlast round: %d findings, want none: %+v", tc.reason, len(last.Findings), last.Findings)
				}
				return
			}
			for _, fd := range last.Findings {
				if fd.Code == tc.want && fd.Subject.Source == tc.src {
					return
				}
			}
			t.Errorf("%s\nlast round has no %s for %s: %+v", tc.reason, tc.want, tc.src, last.Findings)
		})
	}
}

// TestMemoForgetsDeletedSources: a verdict not used by a round is dropped at its end.
func TestMemoForgetsDeletedSources(t *testing.T) {
	f := newFixture(t)
	m := NewMemo()
	both := []desired.Observation{kubeDesired("ns/a", f.cur, now, f.ca.Cert), kubeDesired("ns/b", f.other, now, f.ca.Cert)}
	Run(Inputs{Desired: both, Memo: m}, config.DefaultPolicy, now)
	if n := m.Stats().Entries; n != 2 {
		t.Fatalf("after a round of two clean Secrets the memo holds %d verdicts, want 2", n)
	}
	Run(Inputs{Desired: both[1:], Memo: m}, config.DefaultPolicy, now.Add(time.Minute))
	if st := m.Stats(); st.Entries != 1 || st.Hits != 1 {
		t.Fatalf("after ns/a was deleted: %+v, want 1 verdict kept and reused", st)
	}
	Run(Inputs{Memo: m}, config.DefaultPolicy, now.Add(2*time.Minute))
	if n := m.Stats().Entries; n != 0 {
		t.Fatalf("after every Secret was deleted the memo holds %d verdicts", n)
	}
}

// TestMemoRejudgesServedChains: served chains are checked through the Memo's chain cache across
// rounds, and a round whose served chain or desired bundle changed is judged on what it holds now
// (CHAIN_INCOMPLETE appears and goes), with the same report as a Run without a memo.
func TestMemoRejudgesServedChains(t *testing.T) {
	f := newFixture(t)
	api := func(bundle ...*x509.Certificate) []desired.Observation {
		return []desired.Observation{desiredObs("api", f.viaInter, now, func(it *desired.Item) {
			it.CA, it.CAPath = bundle, "/etc/api/ca.crt"
		})}
	}
	eps := []config.Endpoint{{Address: "127.0.0.1:10001", SNI: []string{"api.example.com"}, Source: "api"}}
	serving := func(chain ...*x509.Certificate) []EnvoyView {
		// Two replicas serving the same chain: the second is a hit within the round.
		return []EnvoyView{envoy("edge-1", nil, eps, served("127.0.0.1:10001", "api.example.com", chain...)),
			envoy("edge-2", nil, eps, served("127.0.0.1:10001", "api.example.com", chain...))}
	}
	full, alone := f.viaInter.Chain(), []*x509.Certificate{f.viaInter.Cert}
	rounds := []struct {
		what    string
		desired []desired.Observation
		envoys  []EnvoyView
		want    bool // CHAIN_INCOMPLETE expected
		misses  uint64
	}{
		{"full chain served", api(f.ca.Cert), serving(full...), false, 1},
		{"the same again", api(f.ca.Cert), serving(full...), false, 0},
		{"the intermediate dropped", api(f.ca.Cert), serving(alone...), true, 1},
		{"restored", api(f.ca.Cert), serving(full...), false, 0},
		{"the bundle replaced by another CA", api(f.ca2.Cert), serving(full...), true, 1},
	}
	m := NewMemo()
	for i, r := range rounds {
		at := now.Add(time.Duration(i) * time.Minute)
		in := Inputs{Desired: r.desired, Envoys: r.envoys, Config: &config.Config{}}
		want := Run(in, config.DefaultPolicy, at)
		in.Memo = m
		before := m.Stats().Chains
		got := Run(in, config.DefaultPolicy, at)
		if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("round %d (%s): report with the memo differs from without (-without +with):\n%s", i+1, r.what, d)
		}
		has := false
		for _, fd := range got.Findings {
			has = has || fd.Code == ChainIncomplete
		}
		if has != r.want {
			t.Errorf("round %d (%s): CHAIN_INCOMPLETE reported = %v, want %v: %+v", i+1, r.what, has, r.want, got.Findings)
		}
		after := m.Stats().Chains
		if misses := after.Misses - before.Misses; misses != r.misses || after.Hits-before.Hits != 2-misses {
			t.Errorf("round %d (%s): %d checks, %d of them from the cache; want %d checked", i+1, r.what,
				after.Misses-before.Misses+after.Hits-before.Hits, after.Hits-before.Hits, r.misses)
		}
	}
}
