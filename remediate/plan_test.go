package remediate

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func pod(ns, name, workload string) audit.EnvoyView {
	return audit.EnvoyView{
		Config: config.Envoy{Name: ns + "/" + name, Admin: "http://10.0.0.1:9901"},
		Pod:    &audit.PodContext{Namespace: ns, Pod: name, Workload: workload},
	}
}

func finding(code audit.Code, envoy, source string) audit.Finding {
	return audit.Finding{Code: code, Severity: audit.Warning, Subject: audit.Subject{Envoy: envoy, Source: source}}
}

// summary is the part of an action a planning test pins down.
type summary struct {
	Strategy Strategy
	Envoy    string
	Workload string
	Pods     []string
	Skip     string
}

func summarize(as []Action) []summary {
	out := []summary{}
	for _, a := range as {
		out = append(out, summary{a.Strategy, a.Target.Envoy, a.Target.Workload.Ref(), a.Pods, a.Skip})
	}
	return out
}

func TestPlan(t *testing.T) {
	kube := Options{Kubernetes: true, Budget: 5, Cooldown: 10 * time.Minute, Now: now}
	web := []audit.EnvoyView{
		pod("ns", "web-a", "Deployment/web"), pod("ns", "web-b", "Deployment/web"), pod("ns", "web-c", "Deployment/web"),
	}
	cases := map[string]struct {
		reason   string
		findings []audit.Finding
		envoys   []audit.EnvoyView
		opt      func(Options) Options
		want     []summary
	}{
		"Clean": {
			reason: "no findings, no actions",
			envoys: web,
			want:   []summary{},
		},
		"StalePodsOnlyEvicted": {
			reason: "each stale pod is evicted once, whatever the number of its findings; the converged pod is not touched",
			findings: []audit.Finding{
				finding(audit.StaleServed, "ns/web-b", "ns/web-tls"), finding(audit.StaleLoaded, "ns/web-b", "ns/web-tls"),
				finding(audit.StaleServed, "ns/web-a", "ns/web-tls"),
			},
			envoys: web,
			want: []summary{
				{Evict, "ns/web-a", "Deployment/web", []string{"ns/web-a"}, ""},
				{Evict, "ns/web-b", "Deployment/web", []string{"ns/web-b"}, ""},
			},
		},
		"NonDriftFindingsIgnored": {
			reason: "expiry, unreachable and hygiene findings prove no stale process",
			findings: []audit.Finding{
				finding(audit.Expiring, "ns/web-a", "ns/web-tls"), finding(audit.Unreachable, "ns/web-b", ""),
				finding(audit.CABundleHygiene, "", "ns/ca"), finding(audit.LoadedServedMismatch, "ns/web-c", "ns/web-tls"),
			},
			envoys: web,
			want:   []summary{},
		},
		"DivergenceWithoutPodIgnored": {
			reason:   "a REPLICA_DIVERGENCE naming only the workload never restarts it all",
			findings: []audit.Finding{{Code: audit.ReplicaDivergence, Severity: audit.Warning, Subject: audit.Subject{Workload: "Deployment/web", Source: "ns/web-tls"}}},
			envoys:   web,
			want:     []summary{},
		},
		"BadSecretKeyMismatch": {
			reason:   "the desired certificate's key does not match: restarting would not help",
			findings: []audit.Finding{finding(audit.StaleServed, "ns/web-a", "ns/web-tls"), finding(audit.KeyMismatch, "", "ns/web-tls")},
			envoys:   web,
			want:     []summary{{Evict, "ns/web-a", "Deployment/web", []string{"ns/web-a"}, SkipBadSecret}},
		},
		"BadSecretRotationFailedElsewhere": {
			reason: "another pod's Envoy rejected the same Secret: this one would reject it too",
			findings: []audit.Finding{finding(audit.StaleServed, "ns/web-a", "ns/web-tls"),
				finding(audit.RotationFailed, "ns/web-b", "ns/web-tls"), finding(audit.StaleServed, "ns/other", "ns/other-tls")},
			envoys: append(web, pod("ns", "other", "Deployment/other")),
			want: []summary{
				{Evict, "ns/other", "Deployment/other", []string{"ns/other"}, ""},
				{Evict, "ns/web-a", "Deployment/web", []string{"ns/web-a"}, SkipBadSecret},
			},
		},
		"StaleProcessRolloutRestartOnce": {
			reason: "a component that never reloads gets one rollout restart for all its stale pods",
			findings: []audit.Finding{finding(audit.StaleProcess, "ns/web-a", "ns/web-tls"),
				finding(audit.StaleProcess, "ns/web-c", "ns/web-tls")},
			envoys: web,
			want:   []summary{{RolloutRestart, "", "Deployment/web", []string{"ns/web-a", "ns/web-c"}, ""}},
		},
		"AnnotationWins": {
			reason:   "the pod's certdrift.dev/reload-strategy overrides the default",
			findings: []audit.Finding{finding(audit.StaleServed, "ns/web-a", "ns/web-tls")},
			envoys:   web,
			opt: func(o Options) Options {
				o.Annotated = map[string]string{"ns/web-a": "admin-quit"}
				return o
			},
			want: []summary{{AdminQuit, "ns/web-a", "Deployment/web", []string{"ns/web-a"}, ""}},
		},
		"BadAnnotation": {
			reason:   "a misspelt strategy is reported, not guessed",
			findings: []audit.Finding{finding(audit.StaleServed, "ns/web-a", "ns/web-tls")},
			envoys:   web,
			opt: func(o Options) Options {
				o.Annotated = map[string]string{"ns/web-a": "restart"}
				return o
			},
			want: []summary{{"", "ns/web-a", "Deployment/web", []string{"ns/web-a"}, SkipBadConfig}},
		},
		"BarePodNotEvicted": {
			reason:   "nothing would replace an evicted bare pod",
			findings: []audit.Finding{finding(audit.StaleServed, "ns/lonely", "ns/web-tls")},
			envoys:   []audit.EnvoyView{pod("ns", "lonely", "")},
			want:     []summary{{Evict, "ns/lonely", "", []string{"ns/lonely"}, SkipUnsupported}},
		},
		"Budget": {
			reason: "the third stale pod is beyond a budget of two",
			findings: []audit.Finding{finding(audit.StaleServed, "ns/web-a", "s"), finding(audit.StaleServed, "ns/web-b", "s"),
				finding(audit.StaleServed, "ns/web-c", "s")},
			envoys: web,
			opt:    func(o Options) Options { o.Budget = 2; return o },
			want: []summary{
				{Evict, "ns/web-a", "Deployment/web", []string{"ns/web-a"}, ""},
				{Evict, "ns/web-b", "Deployment/web", []string{"ns/web-b"}, ""},
				{Evict, "ns/web-c", "Deployment/web", []string{"ns/web-c"}, SkipBudget},
			},
		},
		"Cooldown": {
			reason: "a workload reloaded five minutes ago is left alone; another one is not",
			findings: []audit.Finding{finding(audit.StaleServed, "ns/web-a", "s"),
				finding(audit.StaleServed, "ns/other", "o")},
			envoys: append(web, pod("ns", "other", "Deployment/other")),
			opt: func(o Options) Options {
				o.LastAction = map[string]time.Time{"ns/Deployment/web": now.Add(-5 * time.Minute), "ns/Deployment/other": now.Add(-11 * time.Minute)}
				return o
			},
			want: []summary{
				{Evict, "ns/other", "Deployment/other", []string{"ns/other"}, ""},
				{Evict, "ns/web-a", "Deployment/web", []string{"ns/web-a"}, SkipCooldown},
			},
		},
		"LocalNeedsStrategy": {
			reason:   "outside Kubernetes nothing is done without a configured strategy",
			findings: []audit.Finding{finding(audit.StaleServed, "edge", "web")},
			envoys:   []audit.EnvoyView{{Config: config.Envoy{Name: "edge", Admin: "http://127.0.0.1:9901"}}},
			opt:      func(Options) Options { return Options{Budget: 5, Now: now} },
			want:     []summary{{"", "edge", "", nil, SkipNoStrategy}},
		},
		"LocalAdminQuit": {
			reason:   "a local Envoy with an admin URL can be asked to quit",
			findings: []audit.Finding{finding(audit.StaleLoaded, "edge", "web")},
			envoys:   []audit.EnvoyView{{Config: config.Envoy{Name: "edge", Admin: "http://127.0.0.1:9901"}}},
			opt:      func(Options) Options { return Options{Budget: 5, Now: now, Strategy: AdminQuit} },
			want:     []summary{{AdminQuit, "edge", "", nil, ""}},
		},
		"LocalEvictUnsupported": {
			reason:   "evict needs a pod",
			findings: []audit.Finding{finding(audit.StaleLoaded, "edge", "web")},
			envoys:   []audit.EnvoyView{{Config: config.Envoy{Name: "edge"}}},
			opt:      func(Options) Options { return Options{Budget: 5, Now: now, Strategy: Evict} },
			want:     []summary{{Evict, "edge", "", nil, SkipUnsupported}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			opt := kube
			if tc.opt != nil {
				opt = tc.opt(opt)
			}
			got := Plan(audit.Report{Findings: tc.findings}, audit.Inputs{Envoys: tc.envoys}, opt)
			if diff := cmp.Diff(tc.want, summarize(got)); diff != "" {
				t.Errorf("%s\nPlan() -want +got:\n%s", tc.reason, diff)
			}
			for _, a := range got {
				if a.Why == "" {
					t.Errorf("action %+v says nothing about why", a.Target)
				}
			}
		})
	}
}

func TestParseStrategy(t *testing.T) {
	for _, s := range Strategies {
		if got, err := ParseStrategy(string(s)); err != nil || got != s {
			t.Errorf("ParseStrategy(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseStrategy("kill"); err == nil {
		t.Error("ParseStrategy(kill) accepted")
	}
}
