package remediate

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/audit"
)

func TestCheckReplicas(t *testing.T) {
	cases := map[string]struct {
		reason string
		r      Replicas
		want   string
	}{
		"AllReady": {
			reason: "3 of 3 Ready: taking one down leaves 2 = replicas−1",
			r:      Replicas{Desired: 3, Ready: 3, TargetReady: true},
		},
		"ReplacementCrashLooping": {
			reason: "2 of 3 Ready (the earlier replacement never came up): one more would leave 1",
			r:      Replicas{Desired: 3, Ready: 2, TargetReady: true},
			want:   SkipTooFewReady,
		},
		"TargetNotReady": {
			reason: "a pod that is not Ready does not lower the count when it goes",
			r:      Replicas{Desired: 3, Ready: 2, TargetReady: false},
		},
		"SingleReplica": {
			reason: "one replica: replicas−1 is 0, as evicting the only pod of a workload always allowed",
			r:      Replicas{Desired: 1, Ready: 1, TargetReady: true},
		},
		"NoneReady": {
			reason: "nothing Ready at all: never act",
			r:      Replicas{Desired: 2, Ready: 0, TargetReady: false},
			want:   SkipTooFewReady,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, why := checkReplicas("shop/Deployment/web", tc.r)
			if got != tc.want {
				t.Errorf("%s: skip %q (%s), want %q", tc.reason, got, why, tc.want)
			}
			if got != "" && !strings.Contains(why, "shop/Deployment/web") {
				t.Errorf("why %q does not name the workload", why)
			}
		})
	}
}

func TestCheckRecord(t *testing.T) {
	now := time.Date(2026, 11, 25, 22, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		reason string
		rec    Record
		want   string
	}{
		"Nothing":   {reason: "only a cooldown recorded", rec: Record{At: now.Add(-time.Hour)}},
		"Done":      {reason: "verified", rec: Record{State: StateDone, Since: now.Add(-time.Minute)}},
		"Recovered": {reason: "lifted", rec: Record{State: StateRecovered, Since: now.Add(-time.Minute)}},
		"Failed": {
			reason: "a failed action blocks however long ago it was",
			rec:    Record{State: StateFailed, Reason: ReasonReplacementNotReady, Since: now.Add(-30 * 24 * time.Hour), Strategy: Evict, Target: "shop/web-1"},
			want:   SkipBlocked,
		},
		"ActingRecently": {
			reason: "another run or replica is still within its action's deadline",
			rec:    Record{State: StateActing, Since: now.Add(-time.Minute), Strategy: Evict},
			want:   SkipReplacementNotReady,
		},
		"ActingLongAgo": {
			reason: "past the deadline the caller verifies it first (resolveActing): no skip from the record alone",
			rec:    Record{State: StateActing, Since: now.Add(-time.Hour)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, why := checkRecord("certdrift", ParseWorkload("shop", "Deployment/web"), tc.rec, now, 3*time.Minute)
			if got != tc.want {
				t.Errorf("%s: skip %q (%s), want %q", tc.reason, got, why, tc.want)
			}
			if got == SkipBlocked && !strings.Contains(why, "kubectl -n certdrift annotate lease certdrift-reload.shop.deployment.web certdrift.dev/last-outcome-") {
				t.Errorf("blocked, but why %q does not say how to clear it", why)
			}
		})
	}
}

func TestRecordFromLease(t *testing.T) {
	at := time.Date(2026, 11, 25, 21, 0, 0, 0, time.UTC)
	rt := metav1.NewMicroTime(at)
	cases := map[string]struct {
		reason      string
		annotations map[string]string
		want        Record
		blocking    bool
	}{
		"CooldownOnly": {
			reason: "a Lease from before outcomes were recorded, or one a person cleared",
			want:   Record{At: at},
		},
		"Failed": {
			reason: "failed, with its reason and time",
			annotations: map[string]string{AnnOutcome: StateFailed, AnnReason: ReasonReplacementNotReady,
				AnnOutcomeTime: at.Add(time.Minute).Format(time.RFC3339Nano), AnnStrategy: "evict", AnnTarget: "shop/web-1"},
			want: Record{At: at, State: StateFailed, Reason: ReasonReplacementNotReady, Since: at.Add(time.Minute),
				Strategy: Evict, Target: "shop/web-1"},
			blocking: true,
		},
		"Garbage": {
			reason:      "a value nobody wrote on purpose blocks rather than lets certdrift act",
			annotations: map[string]string{AnnOutcome: "fine"},
			want:        Record{At: at, State: StateFailed, Reason: ReasonUnverified, Detail: `unknown certdrift.dev/last-outcome value "fine"`},
			blocking:    true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := recordFromLease(&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations},
				Spec: coordv1.LeaseSpec{RenewTime: &rt}})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
			if got.Blocking() != tc.blocking {
				t.Errorf("%s: Blocking() %v, want %v", tc.reason, got.Blocking(), tc.blocking)
			}
		})
	}
}

func TestHealthyWorkloads(t *testing.T) {
	b := func(envoy, workload, state string) audit.Binding {
		return audit.Binding{Envoy: envoy, Workload: workload, Source: "x", State: state}
	}
	rep := audit.Report{
		Bindings: []audit.Binding{
			b("shop/web-1", "Deployment/web", audit.StateConverged),
			b("shop/web-2", "Deployment/web", audit.StateConverged),
			b("shop/api-1", "Deployment/api", audit.StateConverged),
			b("shop/api-2", "Deployment/api", audit.StateStale),
			b("edge/gw-1", "DaemonSet/gw", audit.StateConverged),
			b("edge/db-0", "StatefulSet/db", audit.StateConverged),
			b("bare", "", audit.StateConverged),
		},
		Findings: []audit.Finding{
			{Code: audit.Unreachable, Subject: audit.Subject{Envoy: "edge/gw-1"}},
			{Code: audit.ReplicaDivergence, Subject: audit.Subject{Workload: "StatefulSet/db"}},
		},
	}
	got := HealthyWorkloads(rep)
	if diff := cmp.Diff([]Workload{{Namespace: "shop", Kind: "Deployment", Name: "web"}}, got); diff != "" {
		t.Errorf("only web is wholly converged with no finding (-want +got):\n%s", diff)
	}
}
