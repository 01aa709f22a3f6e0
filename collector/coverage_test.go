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
