package exposition

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/certdrift/certdrift/audit"
)

// TestCoverageExposed: the audit's coverage of the round is exposed as it is, and follows the
// next round.
func TestCoverageExposed(t *testing.T) {
	cases := map[string]struct {
		reason string
		cov    audit.Coverage
		golden string
	}{
		"Incomplete": {
			reason: "two bindings and one handshake could not be judged, two gaps",
			cov:    audit.Coverage{BindingsJudged: 3, Bindings: 5, HandshakesJudged: 1, Handshakes: 2, Gaps: 2},
			golden: `
certdrift_coverage_bindings{judged="false"} 2
certdrift_coverage_bindings{judged="true"} 3
certdrift_coverage_complete 0
certdrift_coverage_gaps 2
certdrift_coverage_handshakes{judged="false"} 1
certdrift_coverage_handshakes{judged="true"} 1
`,
		},
		"Complete": {
			reason: "everything in scope judged",
			cov:    audit.Coverage{BindingsJudged: 2, Bindings: 2, HandshakesJudged: 2, Handshakes: 2, Complete: true},
			golden: `
certdrift_coverage_bindings{judged="false"} 0
certdrift_coverage_bindings{judged="true"} 2
certdrift_coverage_complete 1
certdrift_coverage_gaps 0
certdrift_coverage_handshakes{judged="false"} 0
certdrift_coverage_handshakes{judged="true"} 2
`,
		},
	}
	names := []string{"certdrift_coverage_bindings", "certdrift_coverage_handshakes", "certdrift_coverage_gaps", "certdrift_coverage_complete"}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := NewStore(Options{Now: clock(t0)})
			// A round with the other coverage first: the exposed one must be the last round's.
			other := audit.Coverage{BindingsJudged: 7, Bindings: 9, HandshakesJudged: 4, Handshakes: 8, Gaps: 5, Complete: !tc.cov.Complete}
			for i, cov := range []audit.Coverage{other, tc.cov} {
				r := kubeRound(t0.Add(time.Duration(i)*time.Second), true)
				r.Report.Summary.Coverage = cov
				s.Record(r)
			}
			var help strings.Builder
			for _, l := range strings.Split(strings.TrimSpace(tc.golden), "\n") {
				n := l[:strings.IndexAny(l, "{ ")]
				if !strings.Contains(help.String(), "# TYPE "+n+" ") {
					help.WriteString("# TYPE " + n + " gauge\n")
				}
				help.WriteString(l + "\n")
			}
			if err := testutil.CollectAndCompare(findingCollector{s}, strings.NewReader(withHelp(help.String())), names...); err != nil {
				t.Errorf("%s: %v", tc.reason, err)
			}
		})
	}
}

// withHelp adds each family's HELP line, as the collector declares it, before its TYPE line.
func withHelp(text string) string {
	helps := map[string]string{}
	for _, d := range []struct{ name, help string }{
		{"certdrift_coverage_bindings", `Bindings of the last round that could be judged (judged="true") or not (judged="false", state unknown).`},
		{"certdrift_coverage_handshakes", `Handshakes of the last round that returned a certificate to judge (judged="true") or not (judged="false").`},
		{"certdrift_coverage_gaps", "Findings of the last round that mark input not judged (UNREACHABLE, PARSE_ERROR, SOURCE_MISSING)."},
		{"certdrift_coverage_complete", "Whether the last round judged everything in scope (1) or not (0): no unjudged binding or handshake, no gap."},
	} {
		helps[d.name] = d.help
	}
	var out strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		if n, ok := strings.CutPrefix(l, "# TYPE "); ok {
			name := strings.Fields(n)[0]
			out.WriteString("# HELP " + name + " " + helps[name] + "\n")
		}
		out.WriteString(l)
	}
	return out.String()
}
