package collector

import (
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/ref"
)

// findingLabels are bounded by the world certdrift watches: codes and severities are closed sets,
// the rest name objects that exist. envoy is the configured name in local mode and
// "namespace/pod" in Kubernetes mode.
var (
	findingLabels  = newLabelIndex("code", "severity", "namespace", "workload", "pod", "envoy", "source", "secret", "sni")
	driftLabels    = newLabelIndex("namespace", "workload", "pod", "envoy", "source", "item")
	judgedLabels   = labelSet("judged")
	bindingsLabels = labelSet("state")
)

var (
	findingFamily = newFamily("certdrift_finding",
		"An active finding (value 1); the series disappears when the finding resolves. Codes are documented in docs/findings.md.",
		dto.MetricType_GAUGE, findingLabels.names)
	driftAge = newFamily("certdrift_drift_age_seconds",
		"How long a stale binding has differed from its desired certificate: since the desired change time (also when it was before certdrift started), else since certdrift first saw it differ.",
		dto.MetricType_GAUGE, driftLabels.names)
	convergenceFamily = newFamily("certdrift_rotation_convergence_seconds",
		"Time from a desired certificate's change until a bound Envoy both loaded and served it, one observation per binding and rotation, including rotations that began before certdrift started.",
		dto.MetricType_HISTOGRAM)
	convergingFamily = newFamily("certdrift_bindings_converging",
		"Pending rotations: bindings not yet seen loading and serving their desired certificate since it changed, whether the last verdict was converging, stale or unknown.",
		dto.MetricType_GAUGE)
	coverageBindings = newFamily("certdrift_coverage_bindings",
		"Bindings of the last round that could be judged (judged=\"true\") or not (judged=\"false\", state unknown).", dto.MetricType_GAUGE, judgedLabels)
	coverageHandshakes = newFamily("certdrift_coverage_handshakes",
		"Handshakes of the last round that returned a certificate to judge (judged=\"true\") or not (judged=\"false\").", dto.MetricType_GAUGE, judgedLabels)
	coverageGaps = newFamily("certdrift_coverage_gaps",
		"Findings of the last round that mark input not judged (UNREACHABLE, PARSE_ERROR, SOURCE_MISSING).", dto.MetricType_GAUGE)
	coverageComplete = newFamily("certdrift_coverage_complete",
		"Whether the last round judged everything in scope (1) or not (0): no unjudged binding or handshake, no gap.", dto.MetricType_GAUGE)
	bindingsFamily = newFamily("certdrift_bindings",
		"Bindings of the last round by the audit's verdict (converged, converging within the grace period, stale beyond it, unknown).", dto.MetricType_GAUGE, bindingsLabels)
)

// renderJudgement renders the round's judgement into the round object: findings, bindings by
// verdict, pending rotations (converging, from the Tracker) and coverage — how much of what was
// in scope could be judged at all. Coverage comes from the audit's summary of the round
// (audit.Coverage), so the exporter and `certdrift audit` state the same "judged N of M";
// judged/not judged are two series rather than a judged count and a total, so that nothing
// exposed is a sum of other series.
func renderJudgement(rs *rowSet, r Round, shard Shard, ids map[string]identity, converging int) {
	seen := map[string]bool{}
	gaps := 0 // of the findings this shard exposes: replicas' gaps add up to the fleet's
	for _, f := range r.Report.Findings {
		key := f.Subject.Envoy
		if key == "" {
			key = ref.SourceKey(f.Subject.Source)
		}
		if !shard.Owns(key) {
			continue
		}
		if f.Code.MarksGap() {
			gaps++
		}
		id := ids[f.Subject.Envoy]
		ns := id.namespace
		if ns == "" {
			ns = sourceNamespace(f.Subject.Source, r.Kubernetes)
		}
		values := findingLabels.values("code", string(f.Code), "severity", f.Severity.String(), "namespace", ns,
			"workload", cmpOr(f.Subject.Workload, id.workload), "pod", id.pod, "envoy", f.Subject.Envoy,
			"source", f.Subject.Source, "secret", f.Subject.Secret, "sni", f.Subject.SNI)
		if k := joinKey(values); !seen[k] {
			seen[k] = true
			rs.sample(findingFamily, findingLabels.names, values, 1)
		}
	}
	rs.sample(convergingFamily, nil, nil, float64(converging))
	states := []string{audit.StateConverged, audit.StateConverging, audit.StateStale, audit.StateUnknown}
	byState := map[string]int{}
	for _, b := range r.Report.Bindings {
		if shard.Owns(b.Envoy) {
			byState[cmpOr(b.State, audit.StateUnknown)]++
		}
	}
	for _, st := range states {
		rs.sample(bindingsFamily, bindingsLabels, []string{st}, float64(byState[st]))
	}
	cov := r.Report.Summary.Coverage
	rs.sample(coverageBindings, judgedLabels, []string{"true"}, float64(cov.BindingsJudged))
	rs.sample(coverageBindings, judgedLabels, []string{"false"}, float64(cov.Bindings-cov.BindingsJudged))
	rs.sample(coverageHandshakes, judgedLabels, []string{"true"}, float64(cov.HandshakesJudged))
	rs.sample(coverageHandshakes, judgedLabels, []string{"false"}, float64(cov.Handshakes-cov.HandshakesJudged))
	complete := cov.Complete
	if shard.Total > 1 {
		// A shard's round also judges sources another shard exposes (its pods mount them):
		// their gaps are that shard's to report. Its bindings and handshakes are its own.
		complete = gaps == 0 && cov.BindingsJudged == cov.Bindings && cov.HandshakesJudged == cov.Handshakes
	} else {
		gaps = cov.Gaps
	}
	rs.sample(coverageGaps, nil, nil, float64(gaps))
	rs.sample(coverageComplete, nil, nil, boolf(complete))
	renderSourcesUp(rs, r.SourcesUp)
}

// driftSeries is a stale binding's drift-age series: its labels, and since when it differs. The
// age is rendered per scrape.
type driftSeries struct {
	values []string // driftLabels' order
	since  time.Time
}

// driftSeriesOf labels the Tracker's stale bindings.
func driftSeriesOf(r Round, stale []audit.StaleBinding) []driftSeries {
	ids := envoyIdentities(r)
	out := make([]driftSeries, 0, len(stale))
	for _, st := range stale {
		b := st.Binding
		id := ids[b.Envoy]
		out = append(out, driftSeries{since: st.Since, values: driftLabels.values("namespace", id.namespace,
			"workload", cmpOr(b.Workload, id.workload), "pod", id.pod, "envoy", b.Envoy, "source", b.Source, "item", b.Item)})
	}
	return out
}
