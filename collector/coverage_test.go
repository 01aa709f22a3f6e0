package collector

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/audit"
)

// TestCoverageExposed: the audit's coverage of the last round is exposed as it is — judged and
// not judged as two series each — and replaces the previous round's.
func TestCoverageExposed(t *testing.T) {
	cases := map[string]struct {
		reason string
		cov    audit.Coverage
		want   map[string]float64
	}{
		"Incomplete": {
			reason: "two bindings and one handshake could not be judged, two gaps",
			cov:    audit.Coverage{BindingsJudged: 3, Bindings: 5, HandshakesJudged: 1, Handshakes: 2, Gaps: 2},
			want: map[string]float64{
				`certdrift_coverage_bindings{judged="true"}`: 3, `certdrift_coverage_bindings{judged="false"}`: 2,
				`certdrift_coverage_handshakes{judged="true"}`: 1, `certdrift_coverage_handshakes{judged="false"}`: 1,
				`certdrift_coverage_gaps`: 2, `certdrift_coverage_complete`: 0,
			},
		},
		"Complete": {
			reason: "everything in scope judged",
			cov:    audit.Coverage{BindingsJudged: 2, Bindings: 2, HandshakesJudged: 2, Handshakes: 2, Complete: true},
			want: map[string]float64{
				`certdrift_coverage_bindings{judged="true"}`: 2, `certdrift_coverage_bindings{judged="false"}`: 0,
				`certdrift_coverage_handshakes{judged="true"}`: 2, `certdrift_coverage_handshakes{judged="false"}`: 0,
				`certdrift_coverage_gaps`: 0, `certdrift_coverage_complete`: 1,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := NewStore(Options{Now: clock(t0)})
			if got := coverageSeries(t, s); len(got) != 0 {
				t.Errorf("coverage before the first round: %v, want none", got)
			}
			other := audit.Coverage{BindingsJudged: 7, Bindings: 9, HandshakesJudged: 4, Handshakes: 8, Gaps: 5, Complete: !tc.cov.Complete}
			for i, cov := range []audit.Coverage{other, tc.cov} {
				r := kubeRound(t0.Add(time.Duration(i)*time.Second), true)
				r.Report.Summary.Coverage = cov
				s.Record(r)
			}
			if diff := cmp.Diff(tc.want, coverageSeries(t, s)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func coverageSeries(t *testing.T, s *Store) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	mfs := gatherStore(t, s)
	for _, name := range []string{"certdrift_coverage_bindings", "certdrift_coverage_handshakes", "certdrift_coverage_gaps", "certdrift_coverage_complete"} {
		for _, m := range family(mfs, name) {
			key := name
			if j, ok := labelMap(m)["judged"]; ok {
				key += `{judged="` + j + `"}`
			}
			got[key] = m.GetGauge().GetValue()
		}
	}
	return got
}

// TestCoverageSharded: split over replicas, each counts the gaps among the findings it exposes,
// so that their gaps add up to the round's and only the replica exposing a gap is incomplete. A
// shard's round also judges Secrets another shard owns (its pods mount them): counting the
// audit's whole coverage would report their gaps twice, and every replica incomplete.
func TestCoverageSharded(t *testing.T) {
	r := kubeRound(t0, true)
	r.Report.Findings = []audit.Finding{
		{Code: audit.ParseError, Severity: audit.Warning, Subject: audit.Subject{Source: "ns-b/broken"}},
		{Code: audit.Unbound, Severity: audit.Warning, Subject: audit.Subject{Envoy: "ns-a/gw-0"}},
		{Code: audit.Expiring, Severity: audit.Warning, Subject: audit.Subject{Source: "ns-b/tls-b"}},
	}
	r.Report.Summary.Coverage = audit.Coverage{BindingsJudged: 1, Bindings: 1, Gaps: 2}
	const total = 4
	owner := func(key string) int {
		for i := range total {
			if (Shard{Index: i, Total: total}).Owns(key) {
				return i
			}
		}
		t.Fatalf("no shard owns %s", key)
		return -1
	}
	if owner("ns-b/broken") == owner("ns-a/gw-0") {
		t.Fatalf("the fixture's two gaps land in one shard of %d; it proves nothing", total)
	}
	sum := 0.0
	for i := range total {
		s := NewStore(Options{Now: clock(t0), Shard: Shard{Index: i, Total: total}})
		s.Record(r)
		got := coverageSeries(t, s)
		sum += got["certdrift_coverage_gaps"]
		wantComplete := 1.0
		if i == owner("ns-b/broken") || i == owner("ns-a/gw-0") {
			wantComplete = 0
		}
		if got["certdrift_coverage_complete"] != wantComplete {
			t.Errorf("shard %d: complete %v, want %v (gaps %v)", i, got["certdrift_coverage_complete"], wantComplete, got["certdrift_coverage_gaps"])
		}
	}
	if sum != 2 {
		t.Errorf("gaps summed over %d shards: %v, want the round's 2", total, sum)
	}
}
