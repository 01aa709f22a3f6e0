package collector

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRepairMetrics(t *testing.T) {
	at := time.Unix(1700000000, 500_000_000)
	cases := map[string]struct {
		reason string
		record func(m *RepairMetrics)
		want   string
	}{
		"NothingYet": {
			reason: "every pair is declared at zero and the last-action time is absent",
			record: func(*RepairMetrics) {},
			want: `
certdrift_reload_actions_total{outcome="done",strategy="evict"} 0
certdrift_reload_actions_total{outcome="done",strategy="none"} 0
certdrift_reload_actions_total{outcome="skipped",strategy="evict"} 0
certdrift_reload_actions_total{outcome="skipped",strategy="none"} 0
`,
		},
		"ActedAndSkipped": {
			reason: "a done action sets the time; a skipped one and undeclared values do not add labels",
			record: func(m *RepairMetrics) {
				m.ReloadAction("evict", "done", true, at)
				m.ReloadAction("evict", "skipped", false, at.Add(time.Hour))
				m.ReloadAction("", "skipped", false, at)
				m.ReloadAction("bogus", "skipped", false, at)
				m.ReloadAction("evict", "exploded", true, at.Add(time.Hour))
			},
			want: `
certdrift_reload_actions_total{outcome="done",strategy="evict"} 1
certdrift_reload_actions_total{outcome="done",strategy="none"} 0
certdrift_reload_actions_total{outcome="skipped",strategy="evict"} 1
certdrift_reload_actions_total{outcome="skipped",strategy="none"} 2
certdrift_reload_last_action_timestamp_seconds 1.7000000005e+09
`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := NewRepairMetrics([]string{"evict"}, []string{"done", "skipped"})
			tc.record(m)
			want := `# HELP certdrift_reload_actions_total Reload actions by strategy and outcome (done, refused, failed, skipped, planned), counted once per round that planned them.
# TYPE certdrift_reload_actions_total counter
` + strings.TrimPrefix(tc.want, "\n")
			if strings.Contains(tc.want, "last_action") {
				want = strings.Replace(want, "certdrift_reload_last_action_timestamp_seconds ",
					"# HELP certdrift_reload_last_action_timestamp_seconds When the last reload action that touched an Envoy (outcome done, refused or failed) ended.\n# TYPE certdrift_reload_last_action_timestamp_seconds gauge\ncertdrift_reload_last_action_timestamp_seconds ", 1)
			}
			if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
				t.Errorf("%s:\n%v", tc.reason, err)
			}
			if probs, err := testutil.CollectAndLint(m); err != nil || len(probs) > 0 {
				t.Errorf("lint: %v %v", probs, err)
			}
		})
	}
}

// TestRepairBlocked: the blocked workloads are a snapshot; a reason outside the declared set is
// "unknown", duplicates are one series, and a workload no longer blocked loses its series.
func TestRepairBlocked(t *testing.T) {
	m := NewRepairMetrics(nil, nil).WithReasons([]string{"replacement_not_ready"})
	m.SetBlocked([]BlockedWorkload{
		{Namespace: "shop", Workload: "Deployment/web", Reason: "replacement_not_ready"},
		{Namespace: "shop", Workload: "Deployment/web", Reason: "replacement_not_ready"},
		{Namespace: "edge", Workload: "DaemonSet/gw", Reason: "something the pod said"},
	})
	head := `# HELP certdrift_reload_blocked 1 for each workload on which repair is blocked because an earlier action failed or was never verified (reason), as the leader last saw it.
# TYPE certdrift_reload_blocked gauge
`
	want := head + `certdrift_reload_blocked{namespace="edge",reason="unknown",workload="DaemonSet/gw"} 1
certdrift_reload_blocked{namespace="shop",reason="replacement_not_ready",workload="Deployment/web"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "certdrift_reload_blocked"); err != nil {
		t.Error(err)
	}
	if probs, err := testutil.CollectAndLint(m); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", probs, err)
	}
	m.SetBlocked([]BlockedWorkload{{Namespace: "shop", Workload: "Deployment/web", Reason: "replacement_not_ready"}})
	want = head + `certdrift_reload_blocked{namespace="shop",reason="replacement_not_ready",workload="Deployment/web"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "certdrift_reload_blocked"); err != nil {
		t.Errorf("after edge/DaemonSet/gw was unblocked: %v", err)
	}
	m.SetBlocked(nil)
	if n := testutil.CollectAndCount(m, "certdrift_reload_blocked"); n != 0 {
		t.Errorf("%d blocked series after SetBlocked(nil), want 0", n)
	}
}
