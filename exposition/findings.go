package exposition

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
	bindingsDesc = prometheus.NewDesc("certdrift_bindings",
		"Bindings of the last round by the audit's verdict (converged, converging within the grace period, stale beyond it, unknown).", []string{"state"}, nil)
)

// findingCollector exposes findings and the drift and convergence tracking of the bindings.
type findingCollector struct{ s *Store }

func (c findingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- findingDesc
	ch <- driftAgeDesc
	ch <- convergenceDesc
	ch <- convergingDesc
	ch <- bindingsDesc
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
	}
}
