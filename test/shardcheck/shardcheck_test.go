package shardcheck

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Errorf says.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Logf(string, ...any)          {}
func (r *recorder) Errorf(f string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(f, args...)) }

// TestCompare: the checker itself fails on a lost series, one exposed twice, counts that do not
// add up and a replica that hides an incomplete round; it passes a faithful split.
func TestCompare(t *testing.T) {
	whole := `certdrift_finding{code="STALE_SERVED",envoy="a/gw-0",source="b/web"} 1
certdrift_certificate_info{envoy="a/gw-0",source="b/web",view="served"} 1
certdrift_certificate_info{envoy="",source="b/web",view="desired"} 1
certdrift_ca_certificate_info{serial="1",view="desired"} 1
certdrift_bindings{state="stale"} 1
certdrift_coverage_complete 1
`
	shard0 := `certdrift_finding{code="STALE_SERVED",envoy="a/gw-0",source="b/web"} 1
certdrift_certificate_info{envoy="a/gw-0",source="b/web",view="served"} 1
certdrift_ca_certificate_info{serial="1",view="desired"} 1
certdrift_bindings{state="stale"} 1
certdrift_coverage_complete 1
`
	shard1 := `certdrift_certificate_info{envoy="",source="b/web",view="desired"} 1
certdrift_ca_certificate_info{serial="1",view="desired"} 1
certdrift_bindings{state="stale"} 0
certdrift_coverage_complete 1
`
	cases := map[string]struct {
		reason string
		parts  []string
		want   []string // substrings of the errors, none for a faithful split
	}{
		"Faithful": {reason: "each series once, counts adding up", parts: []string{shard0, shard1}},
		"Lost": {reason: "the served series of another shard's Secret lost", parts: []string{strings.Replace(shard0, `certdrift_certificate_info{envoy="a/gw-0",source="b/web",view="served"} 1`+"\n", "", 1), shard1},
			want: []string{"certdrift_certificate_info over the replicas"}},
		"Twice": {reason: "the finding exposed by both", parts: []string{shard0, shard1 + `certdrift_finding{code="STALE_SERVED",envoy="a/gw-0",source="b/web"} 1` + "\n"},
			want: []string{"both expose"}},
		"Counts": {reason: "a binding counted by both", parts: []string{shard0, strings.Replace(shard1, `{state="stale"} 0`, `{state="stale"} 1`, 1)},
			want: []string{"certdrift_bindings over the replicas"}},
		"Incomplete": {reason: "a replica says incomplete where the whole is complete", parts: []string{shard0, strings.Replace(shard1, "complete 1", "complete 0", 1)},
			want: []string{"certdrift_coverage_complete"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{TB: t}
			var parts []map[string]map[string]float64
			for _, p := range tc.parts {
				parts = append(parts, parse(p))
			}
			compare(rec, 2, parse(whole), parts)
			if len(tc.want) == 0 && len(rec.errs) > 0 {
				t.Errorf("%s: errors %v, want none", tc.reason, rec.errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(strings.Join(rec.errs, "\n"), w) {
					t.Errorf("%s: errors %v, want one saying %q", tc.reason, rec.errs, w)
				}
			}
		})
	}
	if got := crossingTotal(parse(whole)); got == 0 {
		t.Error("a pod of a/ serving a Secret of b/ crosses shards at some count from 2 to 8")
	}
	if got := crossingTotal(parse(`certdrift_certificate_info{envoy="",source="b/web",view="desired"} 1` + "\n")); got != 0 {
		t.Errorf("no Envoy series: crossingTotal %d, want 0", got)
	}
}
