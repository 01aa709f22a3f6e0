package collector

import (
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/audit"
)

// rotation records the local-mode story: converged on v1; the Secret rotates to v2 at t0+5s;
// the SDS Envoy converges at t0+30s, the static one never does.
func rotation(s *Store) {
	v1, v2 := cert("v1", 10), cert("v2", 20)
	s.Record(world{desired: v1, sdsLoaded: v1, stLoaded: v1, sdsState: audit.StateConverged, stState: audit.StateConverged}.round(t0))
	s.Record(world{desired: v2, sdsLoaded: v1, stLoaded: v1, sdsState: audit.StateConverging, stState: audit.StateConverging,
		changedAt: t0.Add(5 * time.Second)}.round(t0.Add(10 * time.Second)))
	s.Record(world{desired: v2, sdsLoaded: v2, stLoaded: v1, sdsState: audit.StateConverged, stState: audit.StateStale,
		findings: staleFindings()}.round(t0.Add(30 * time.Second)))
}

func clock(at time.Time) func() time.Time { return func() time.Time { return at } }

func TestCollectorsGolden(t *testing.T) {
	v1, v2 := cert("v1", 10), cert("v2", 20)
	cases := map[string]struct {
		reason  string
		store   func() *Store
		metrics []string
		golden  string
	}{
		"CertificatesPerView": {
			reason: "each view exposes its leaf; the static Envoy's /certs entry borrows v1's fingerprint from the served view; the SDS Envoy's <inline> /certs entry is not repeated",
			store: func() *Store {
				s := NewStore(Options{Now: clock(t0.Add(time.Minute))})
				rotation(s)
				return s
			},
			metrics: []string{"certdrift_certificate_info", "certdrift_certificate_not_after_timestamp_seconds"},
			golden: `
# HELP certdrift_certificate_info Identity of the certificate seen in a view; fingerprint_sha256 is empty when Envoy's /certs named a certificate seen in no other view.
# TYPE certdrift_certificate_info gauge
certdrift_certificate_info{envoy="",fingerprint_sha256="{fp:v2}",issuer="CN=test-ca",location="/secret/tls.crt",namespace="",serial="14",sni="",source="web",subject="CN=v2",view="desired"} 1
certdrift_certificate_info{envoy="sds",fingerprint_sha256="{fp:v2}",issuer="CN=test-ca",location="127.0.0.1:8443",namespace="",serial="14",sni="www.example.com",source="web",subject="CN=v2",view="served"} 1
certdrift_certificate_info{envoy="sds",fingerprint_sha256="{fp:v2}",issuer="CN=test-ca",location="web_cert",namespace="",serial="14",sni="",source="web",subject="CN=v2",view="loaded"} 1
certdrift_certificate_info{envoy="static",fingerprint_sha256="{fp:v1}",issuer="CN=test-ca",location="/secret/tls.crt",namespace="",serial="a",sni="",source="web",subject="CN=v1",view="loaded"} 1
certdrift_certificate_info{envoy="static",fingerprint_sha256="{fp:v1}",issuer="CN=test-ca",location="127.0.0.1:9443",namespace="",serial="a",sni="www.example.com",source="web",subject="CN=v1",view="served"} 1
# HELP certdrift_certificate_not_after_timestamp_seconds End of the certificate's validity, per view (desired, loaded, served).
# TYPE certdrift_certificate_not_after_timestamp_seconds gauge
certdrift_certificate_not_after_timestamp_seconds{envoy="",location="/secret/tls.crt",namespace="",sni="",source="web",view="desired"} 1.7970768e+09
certdrift_certificate_not_after_timestamp_seconds{envoy="sds",location="127.0.0.1:8443",namespace="",sni="www.example.com",source="web",view="served"} 1.7970768e+09
certdrift_certificate_not_after_timestamp_seconds{envoy="sds",location="web_cert",namespace="",sni="",source="web",view="loaded"} 1.7970768e+09
certdrift_certificate_not_after_timestamp_seconds{envoy="static",location="/secret/tls.crt",namespace="",sni="",source="web",view="loaded"} 1.7962128e+09
certdrift_certificate_not_after_timestamp_seconds{envoy="static",location="127.0.0.1:9443",namespace="",sni="www.example.com",source="web",view="served"} 1.7962128e+09
`,
		},
		"FindingsDriftConvergence": {
			reason: "findings collapse per label set; the static binding is stale since the rotation (t0+5s, 55s before the scrape); the SDS binding observed 25s",
			store: func() *Store {
				s := NewStore(Options{Now: clock(t0.Add(time.Minute))})
				rotation(s)
				return s
			},
			metrics: []string{"certdrift_finding", "certdrift_drift_age_seconds", "certdrift_rotation_convergence_seconds", "certdrift_bindings_converging", "certdrift_bindings"},
			golden: `
# HELP certdrift_bindings Bindings of the last round by the audit's verdict (converged, converging within the grace period, stale beyond it, unknown).
# TYPE certdrift_bindings gauge
certdrift_bindings{state="converged"} 1
certdrift_bindings{state="converging"} 0
certdrift_bindings{state="stale"} 1
certdrift_bindings{state="unknown"} 0
# HELP certdrift_bindings_converging Pending rotations: bindings not yet seen loading and serving their desired certificate since it changed, whether the last verdict was converging, stale or unknown.
# TYPE certdrift_bindings_converging gauge
certdrift_bindings_converging 1
# HELP certdrift_drift_age_seconds How long a stale binding has differed from its desired certificate: since the desired change time (also when it was before certdrift started), else since certdrift first saw it differ.
# TYPE certdrift_drift_age_seconds gauge
certdrift_drift_age_seconds{envoy="static",item="",namespace="",pod="",source="web",workload=""} 55
# HELP certdrift_finding An active finding (value 1); the series disappears when the finding resolves. Codes are documented in docs/findings.md.
# TYPE certdrift_finding gauge
certdrift_finding{code="STALE_LOADED",envoy="static",namespace="",pod="",secret="",severity="critical",sni="",source="web",workload=""} 1
certdrift_finding{code="STALE_SERVED",envoy="static",namespace="",pod="",secret="",severity="critical",sni="www.example.com",source="web",workload=""} 1
# HELP certdrift_rotation_convergence_seconds Time from a desired certificate's change until a bound Envoy both loaded and served it, one observation per binding and rotation, including rotations that began before certdrift started.
# TYPE certdrift_rotation_convergence_seconds histogram
certdrift_rotation_convergence_seconds_bucket{le="0.5"} 0
certdrift_rotation_convergence_seconds_bucket{le="1"} 0
certdrift_rotation_convergence_seconds_bucket{le="2"} 0
certdrift_rotation_convergence_seconds_bucket{le="5"} 0
certdrift_rotation_convergence_seconds_bucket{le="10"} 0
certdrift_rotation_convergence_seconds_bucket{le="30"} 1
certdrift_rotation_convergence_seconds_bucket{le="60"} 1
certdrift_rotation_convergence_seconds_bucket{le="120"} 1
certdrift_rotation_convergence_seconds_bucket{le="300"} 1
certdrift_rotation_convergence_seconds_bucket{le="600"} 1
certdrift_rotation_convergence_seconds_bucket{le="1800"} 1
certdrift_rotation_convergence_seconds_bucket{le="+Inf"} 1
certdrift_rotation_convergence_seconds_sum 25
certdrift_rotation_convergence_seconds_count 1
`,
		},
		"KubernetesFindingsAndHealth": {
			reason: "namespace, pod and workload come from the pod; a desired-only finding takes the Secret's namespace; the API server is down; every Kubernetes request counts, 4xx/5xx and no response also as errors, and a code that is not an HTTP status is \"error\"",
			store: func() *Store {
				s := NewStore(Options{Now: clock(t0.Add(time.Minute)), Build: BuildInfo{"v1.2.3", "abc123", "go1.26"}})
				r := kubeRound(t0, true)
				r.SourcesUp["kubernetes"] = false
				s.Record(r)
				for _, code := range []string{"200", "200", "404", "503", "<error>", "42"} {
					s.KubernetesRequest(code)
				}
				s.ConfigReloaded(false, t0)
				return s
			},
			metrics: []string{"certdrift_finding", "certdrift_source_up", "certdrift_envoy_admin_up", "certdrift_probe_errors_total",
				"certdrift_kubernetes_requests_total", "certdrift_kubernetes_request_errors_total", "certdrift_result_age_seconds", "certdrift_last_complete_round_timestamp_seconds",
				"certdrift_build_info", "certdrift_config_last_reload_successful", "certdrift_config_last_reload_success_timestamp_seconds"},
			golden: `
# HELP certdrift_build_info Build of the running certdrift (value 1).
# TYPE certdrift_build_info gauge
certdrift_build_info{goversion="go1.26",revision="abc123",version="v1.2.3"} 1
# HELP certdrift_config_last_reload_successful Whether the last load of the configuration file succeeded (1) or not (0).
# TYPE certdrift_config_last_reload_successful gauge
certdrift_config_last_reload_successful 0
# HELP certdrift_envoy_admin_up Whether the Envoy's admin /certs answered in the last round (1) or not (0).
# TYPE certdrift_envoy_admin_up gauge
certdrift_envoy_admin_up{envoy="ns-a/gw-0",namespace="ns-a",pod="gw-0"} 0
# HELP certdrift_finding An active finding (value 1); the series disappears when the finding resolves. Codes are documented in docs/findings.md.
# TYPE certdrift_finding gauge
certdrift_finding{code="EXPIRING",envoy="",namespace="ns-b",pod="",secret="",severity="warning",sni="",source="ns-b/tls-b",workload=""} 1
certdrift_finding{code="UNREACHABLE",envoy="ns-a/gw-0",namespace="ns-a",pod="gw-0",secret="",severity="warning",sni="",source="",workload="Deployment/gw"} 1
# HELP certdrift_kubernetes_request_errors_total Kubernetes API requests that failed, by HTTP status code ("error" when none came back).
# TYPE certdrift_kubernetes_request_errors_total counter
certdrift_kubernetes_request_errors_total{code="404"} 1
certdrift_kubernetes_request_errors_total{code="503"} 1
certdrift_kubernetes_request_errors_total{code="error"} 2
# HELP certdrift_kubernetes_requests_total Kubernetes API requests, by HTTP status code ("error" when none came back).
# TYPE certdrift_kubernetes_requests_total counter
certdrift_kubernetes_requests_total{code="200"} 2
certdrift_kubernetes_requests_total{code="404"} 1
certdrift_kubernetes_requests_total{code="503"} 1
certdrift_kubernetes_requests_total{code="error"} 2
# HELP certdrift_last_complete_round_timestamp_seconds When the last complete round of observation and judgement finished.
# TYPE certdrift_last_complete_round_timestamp_seconds gauge
certdrift_last_complete_round_timestamp_seconds 1.7953488e+09
# HELP certdrift_probe_errors_total Probes that failed, by kind (tls, admin, desired) and a closed set of reasons.
# TYPE certdrift_probe_errors_total counter
certdrift_probe_errors_total{kind="admin",reason="dial"} 0
certdrift_probe_errors_total{kind="admin",reason="error"} 0
certdrift_probe_errors_total{kind="admin",reason="refused"} 1
certdrift_probe_errors_total{kind="admin",reason="timeout"} 0
certdrift_probe_errors_total{kind="desired",reason="parse"} 0
certdrift_probe_errors_total{kind="desired",reason="read"} 1
certdrift_probe_errors_total{kind="tls",reason="client_cert"} 0
certdrift_probe_errors_total{kind="tls",reason="dial"} 0
certdrift_probe_errors_total{kind="tls",reason="handshake"} 0
certdrift_probe_errors_total{kind="tls",reason="no_certificate"} 0
certdrift_probe_errors_total{kind="tls",reason="refused"} 1
certdrift_probe_errors_total{kind="tls",reason="timeout"} 0
# HELP certdrift_result_age_seconds Age of the exposed results at scrape time: now minus the end of the round they come from.
# TYPE certdrift_result_age_seconds gauge
certdrift_result_age_seconds 60
# HELP certdrift_source_up Whether a data source (files, kubernetes) could be read in the last round (1) or not (0).
# TYPE certdrift_source_up gauge
certdrift_source_up{source="kubernetes"} 0
`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Log(tc.reason)
			compareGolden(t, tc.store(), expand(tc.golden, v1, v2), tc.metrics...)
		})
	}
}

// TestDeletedObjectsLoseTheirSeries: a Secret deleted between rounds takes its certificate,
// up and finding series with it.
func TestDeletedObjectsLoseTheirSeries(t *testing.T) {
	s := NewStore(Options{Now: clock(t0)})
	s.Record(kubeRound(t0, true))
	before := seriesFor(t, s, "ns-b/tls-b")
	if before == 0 {
		t.Fatal("ns-b/tls-b has no series before its deletion: the test proves nothing")
	}
	s.Record(kubeRound(t0.Add(time.Second), false))
	if after := seriesFor(t, s, "ns-b/tls-b"); after != 0 {
		t.Errorf("%d series still name ns-b/tls-b after it was deleted (had %d)", after, before)
	}
}

func seriesFor(t *testing.T, s *Store, source string) int {
	t.Helper()
	return len(seriesOf(t, s, source))
}

// labelledSeries is one gathered series: its family and labels.
type labelledSeries struct {
	family string
	labels map[string]string
}

// seriesOf gathers the store's registry and returns the series whose source label is source.
func seriesOf(t *testing.T, s *Store, source string) []labelledSeries {
	t.Helper()
	mfs := gatherStore(t, s)
	var out []labelledSeries
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["source"] == source {
				out = append(out, labelledSeries{family: mf.GetName(), labels: l})
			}
		}
	}
	return out
}

// TestShardsPartitionTheWorld: with N shards every certificate and finding series appears in
// exactly one replica's exposition.
func TestShardsPartitionTheWorld(t *testing.T) {
	round := kubeRound(t0, true)
	all := exposed(t, NewStore(Options{Now: clock(t0)}), round)
	for _, total := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("Total%d", total), func(t *testing.T) {
			got := map[string]int{}
			for i := 0; i < total; i++ {
				for k := range exposed(t, NewStore(Options{Now: clock(t0), Shard: Shard{Index: i, Total: total}}), round) {
					got[k]++
				}
			}
			want := map[string]int{}
			for k := range all {
				want[k] = 1
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("series per shard (-want once each +got):\n%s", diff)
			}
		})
	}
}

// exposed lists the object series (certificates, findings, up) of one round.
func exposed(t *testing.T, s *Store, r Round) map[string]bool {
	t.Helper()
	s.Record(r)
	mfs := gatherStore(t, s)
	out := map[string]bool{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "certdrift_certificate_info", "certdrift_finding", "certdrift_envoy_admin_up":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			out[mf.GetName()+m.String()] = true
		}
	}
	return out
}

func TestConvergenceClock(t *testing.T) {
	v1, v2, v3 := cert("v1", 10), cert("v2", 20), cert("v3", 30)
	type step struct {
		desired  string
		sdsState string
		at       time.Duration
	}
	byName := map[string]*x509.Certificate{"v1": v1, "v2": v2, "v3": v3}
	cases := map[string]struct {
		reason    string
		steps     []step
		wantCount uint64
		wantSum   float64
	}{
		"NoRotationNoObservation": {
			reason: "a binding converged from the start never observes",
			steps:  []step{{"v1", "converged", 0}, {"v1", "converged", 10 * time.Second}},
		},
		"ObservesOncePerRotation": {
			reason:    "clock starts when the desired fingerprint changes (no change time known: the round's time)",
			steps:     []step{{"v1", "converged", 0}, {"v2", "converging", 10 * time.Second}, {"v2", "converged", 15 * time.Second}, {"v2", "converged", 20 * time.Second}},
			wantCount: 1, wantSum: 5,
		},
		"SecondRotationWhileConvergingRestartsTheClock": {
			reason:    "v3 replaces v2 before the Envoy loaded v2: one observation, timed from v3",
			steps:     []step{{"v1", "converged", 0}, {"v2", "converging", 10 * time.Second}, {"v3", "converging", 20 * time.Second}, {"v3", "converged", 26 * time.Second}},
			wantCount: 1, wantSum: 6,
		},
		"ConvergedInTheSameRound": {
			reason:    "an Envoy faster than the round still observes, with the round's time",
			steps:     []step{{"v1", "converged", 0}, {"v2", "converged", 10 * time.Second}},
			wantCount: 1, wantSum: 0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := NewStore(Options{Now: clock(t0)})
			for _, st := range tc.steps {
				c := byName[st.desired]
				s.Record(world{desired: c, sdsLoaded: c, stLoaded: c, sdsState: st.sdsState, stState: audit.StateUnknown}.round(t0.Add(st.at)))
			}
			h := family(gatherStore(t, s), "certdrift_rotation_convergence_seconds")
			if len(h) != 1 || h[0].GetHistogram().GetSampleCount() != tc.wantCount || h[0].GetHistogram().GetSampleSum() != tc.wantSum {
				t.Errorf("%s: histogram %v, want count %d and sum %g", tc.reason, h, tc.wantCount, tc.wantSum)
			}
		})
	}
}

// TestNamespaceLabelIsTheEnvoys: on certificate series namespace is the namespace of the Envoy
// whose view it is, so desired series have none (the Secret's namespace leads source), while a
// finding about a Secret still carries the Secret's namespace for routing.
func TestNamespaceLabelIsTheEnvoys(t *testing.T) {
	s := NewStore(Options{Now: clock(t0)})
	s.Record(kubeRound(t0, true))
	got := map[string]string{} // family/view → namespace
	for _, ls := range seriesOf(t, s, "ns-b/tls-b") {
		got[ls.family+"/"+ls.labels["view"]] = ls.labels["namespace"]
	}
	want := map[string]string{
		"certdrift_certificate_info/desired":                        "",
		"certdrift_certificate_not_after_timestamp_seconds/desired": "",
		"certdrift_finding/":                                        "ns-b",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("namespace per series of ns-b/tls-b (-want +got):\n%s", diff)
	}
}
