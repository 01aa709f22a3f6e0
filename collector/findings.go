package collector

import (
	"github.com/prometheus/client_golang/prometheus"
)

// findingLabels are bounded by the world certdrift watches: codes and severities are closed sets,
// the rest name objects that exist. envoy is the configured name in local mode and
// "namespace/pod" in Kubernetes mode.
var (
	findingLabels = []string{"code", "severity", "namespace", "workload", "pod", "envoy", "source", "secret", "sni"}
	driftLabels   = []string{"namespace", "workload", "pod", "envoy", "source", "item"}
)

var (
	findingDesc = prometheus.NewDesc("certdrift_finding",
		"An active finding (value 1); the series disappears when the finding resolves. Codes are documented in docs/findings.md.",
		findingLabels, nil)
	driftAgeDesc = prometheus.NewDesc("certdrift_drift_age_seconds",
		"How long a stale binding has differed from its desired certificate: since the desired change time (also when it was before certdrift started), else since certdrift first saw it differ.",
		driftLabels, nil)
	convergenceDesc = prometheus.NewDesc("certdrift_rotation_convergence_seconds",
		"Time from a desired certificate's change until a bound Envoy both loaded and served it, one observation per binding and rotation, including rotations that began before certdrift started.",
		nil, nil)
	convergingDesc = prometheus.NewDesc("certdrift_bindings_converging",
		"Pending rotations: bindings not yet seen loading and serving their desired certificate since it changed, whether the last verdict was converging, stale or unknown.",
		nil, nil)
	coverageBindingsDesc = prometheus.NewDesc("certdrift_coverage_bindings",
		"Bindings of the last round that could be judged (judged=\"true\") or not (judged=\"false\", state unknown).", []string{"judged"}, nil)
	coverageHandshakesDesc = prometheus.NewDesc("certdrift_coverage_handshakes",
		"Handshakes of the last round that returned a certificate to judge (judged=\"true\") or not (judged=\"false\").", []string{"judged"}, nil)
	coverageGapsDesc = prometheus.NewDesc("certdrift_coverage_gaps",
		"Findings of the last round that mark input not judged (UNREACHABLE, PARSE_ERROR, SOURCE_MISSING).", nil, nil)
	coverageCompleteDesc = prometheus.NewDesc("certdrift_coverage_complete",
		"Whether the last round judged everything in scope (1) or not (0): no unjudged binding or handshake, no gap.", nil, nil)
	bindingsDesc = prometheus.NewDesc("certdrift_bindings",
		"Bindings of the last round by the audit's verdict (converged, converging within the grace period, stale beyond it, unknown).", []string{"state"}, nil)
)

// findingCollector exposes findings, the drift and convergence tracking of the bindings, and the
// round's coverage: how much of what was in scope could be judged at all. Coverage comes from
// the audit's summary of the round (audit.Coverage), so the exporter and `certdrift audit` state
// the same "judged N of M"; judged/not judged are two series rather than a judged count and a
// total, so that nothing exposed is a sum of other series.
type findingCollector struct{ s *Store }

func (c findingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- findingDesc
	ch <- driftAgeDesc
	ch <- convergenceDesc
	ch <- convergingDesc
	ch <- bindingsDesc
	ch <- coverageBindingsDesc
	ch <- coverageHandshakesDesc
	ch <- coverageGapsDesc
	ch <- coverageCompleteDesc
}

func (c findingCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.s.view()
	for _, l := range v.snap.findings {
		ch <- prometheus.MustNewConstMetric(findingDesc, prometheus.GaugeValue, 1, l...)
	}
	for _, d := range v.snap.drift {
		ch <- prometheus.MustNewConstMetric(driftAgeDesc, prometheus.GaugeValue, max(0, v.now.Sub(d.since).Seconds()), d.labels...)
	}
	ch <- prometheus.MustNewConstHistogram(convergenceDesc, v.convergence.count, v.convergence.sum, v.convergence.cumulative())
	if !v.snap.finished.IsZero() {
		ch <- prometheus.MustNewConstMetric(convergingDesc, prometheus.GaugeValue, float64(v.snap.converging))
		for state, n := range v.snap.bindings {
			ch <- prometheus.MustNewConstMetric(bindingsDesc, prometheus.GaugeValue, float64(n), state)
		}
		cov := v.snap.coverage
		ch <- prometheus.MustNewConstMetric(coverageBindingsDesc, prometheus.GaugeValue, float64(cov.BindingsJudged), "true")
		ch <- prometheus.MustNewConstMetric(coverageBindingsDesc, prometheus.GaugeValue, float64(cov.Bindings-cov.BindingsJudged), "false")
		ch <- prometheus.MustNewConstMetric(coverageHandshakesDesc, prometheus.GaugeValue, float64(cov.HandshakesJudged), "true")
		ch <- prometheus.MustNewConstMetric(coverageHandshakesDesc, prometheus.GaugeValue, float64(cov.Handshakes-cov.HandshakesJudged), "false")
		ch <- prometheus.MustNewConstMetric(coverageGapsDesc, prometheus.GaugeValue, float64(cov.Gaps))
		ch <- prometheus.MustNewConstMetric(coverageCompleteDesc, prometheus.GaugeValue, boolf(cov.Complete))
	}
}
