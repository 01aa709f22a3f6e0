package metricnames

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParse(t *testing.T) {
	cases := map[string]struct {
		reason   string
		expr     string
		metrics  []string
		grouping []string
		wantErr  string
	}{
		"SelectorWithMatchers": {
			reason:  "matchers are read, not mistaken for metric names",
			expr:    `certdrift_finding{code="STALE_SERVED", severity=~"warning|critical"}`,
			metrics: []string{"certdrift_finding"},
		},
		"AggregationAndBinary": {
			reason:   "functions, keywords and label lists are not metrics; grouping labels are collected",
			expr:     `sum by (namespace, code) (rate(certdrift_probe_errors_total[5m])) > 0 unless on () max without (instance) (certdrift_source_up) == bool 1`,
			metrics:  []string{"certdrift_probe_errors_total", "certdrift_source_up"},
			grouping: []string{"namespace", "code", "instance"},
		},
		"DurationsAndNumbers": {
			reason:  "durations (offset 1h30m, 1e3, 0x1f) must not read as identifiers",
			expr:    `certdrift_result_age_seconds offset 1h30m > 1e3 or certdrift_rounds_total @ start() < 0x1f`,
			metrics: []string{"certdrift_result_age_seconds", "certdrift_rounds_total"},
		},
		"GrafanaVariables": {
			reason:   "template variables in ranges, matchers and values are values",
			expr:     `histogram_quantile(0.9, sum by (le) (rate(certdrift_rotation_convergence_seconds_bucket{job=~"$job"}[$__rate_interval]))) * $factor + ${x:csv} + [[y]]`,
			metrics:  []string{"certdrift_rotation_convergence_seconds_bucket"},
			grouping: []string{"le"},
		},
		"SubqueryAndStrings": {
			reason:  "label_replace's strings are not labels or metrics; a subquery range is skipped",
			expr:    `max_over_time(label_replace(certdrift_drift_age_seconds, "w", "$1", "workload", "(.*)")[1h:5m])`,
			metrics: []string{"certdrift_drift_age_seconds"},
		},
		"UnknownFunction": {
			reason:  "a typo in a function name fails instead of being read as a metric",
			expr:    `rat(certdrift_rounds_total[5m])`,
			wantErr: `unknown function "rat"`,
		},
		"NamelessSelector": {
			reason:  "a selector without a metric name cannot be checked",
			expr:    `{__name__="certdrift_rounds_total"}`,
			wantErr: "has no metric name",
		},
		"UnclosedString": {
			expr:    `certdrift_finding{code="X}`,
			wantErr: "not closed",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := Parse(tc.expr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s\nParse(%q) error = %v, want one containing %q", tc.reason, tc.expr, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s\nParse(%q): %v", tc.reason, tc.expr, err)
			}
			if diff := cmp.Diff(tc.metrics, p.Metrics()); diff != "" {
				t.Errorf("%s\nmetrics (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.grouping, p.Grouping, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\ngrouping (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	doc := Doc{
		"certdrift_finding":                      {Type: "gauge", Labels: []string{"code", "severity", "namespace"}},
		"certdrift_rotation_convergence_seconds": {Type: "histogram"},
	}
	codes := map[string]bool{"STALE_SERVED": true, "EXPIRED": true}
	cases := map[string]struct {
		expr string
		want []string // substrings of the errors, in order
	}{
		"Clean":                {expr: `max by (namespace) (certdrift_finding{code=~"STALE_SERVED|EXPIRED", job="x"})`},
		"HistogramSuffixes":    {expr: `histogram_quantile(0.5, sum by (le) (rate(certdrift_rotation_convergence_seconds_bucket[5m]))) / certdrift_rotation_convergence_seconds_count`},
		"Undocumented":         {expr: `certdrift_findings`, want: []string{"certdrift_findings is not documented"}},
		"UnknownLabel":         {expr: `certdrift_finding{pod="x"}`, want: []string{`has no label "pod"`}},
		"UnknownCode":          {expr: `certdrift_finding{code=~"STALE_SERVED|STALE"}`, want: []string{`finding code "STALE"`}},
		"UnknownExcludedCode":  {expr: `certdrift_finding{code!~"STALE_SERVED|EXPIRD"}`, want: []string{`finding code "EXPIRD"`}},
		"UnknownUnequalCode":   {expr: `certdrift_finding{code!="STALE"}`, want: []string{`finding code "STALE"`}},
		"GroupByUnknown":       {expr: `sum by (pod) (certdrift_finding)`, want: []string{`groups by "pod"`}},
		"BucketOnNonHistogram": {expr: `certdrift_finding_bucket`, want: []string{"not documented"}},
		"NoMetric":             {expr: `vector(1)`, want: []string{"selects no metric"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			errs := doc.Check(tc.expr, codes)
			if len(errs) != len(tc.want) {
				t.Fatalf("Check(%q) = %v, want %d errors", tc.expr, errs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i], w)
				}
			}
		})
	}
}

// TestReadRepositoryDocs reads the real pages, so that a change in their format that would make
// every check above vacuous (no rows found) fails here.
func TestReadRepositoryDocs(t *testing.T) {
	f, err := os.Open("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := ReadDoc(f)
	if err != nil {
		t.Fatalf("docs/metrics.md: %v", err)
	}
	if m, ok := doc["certdrift_finding"]; !ok || len(m.Labels) == 0 {
		t.Errorf("docs/metrics.md: certdrift_finding with its labels not found, got %+v", m)
	}
	g, err := os.Open("../../docs/findings.md")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	codes, err := ReadCodes(g)
	if err != nil {
		t.Fatalf("docs/findings.md: %v", err)
	}
	for _, c := range []string{"STALE_SERVED", "UNREACHABLE", "CA_BUNDLE_GAP"} {
		if !codes[c] {
			t.Errorf("docs/findings.md: code %s not found among %v", c, codes)
		}
	}
}
