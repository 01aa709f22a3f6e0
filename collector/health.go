package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	sourceUpDesc = prometheus.NewDesc("certdrift_source_up",
		"Whether a data source (files, kubernetes) could be read in the last round (1) or not (0).", []string{"source"}, nil)
	envoyUpDesc = prometheus.NewDesc("certdrift_envoy_admin_up",
		"Whether the Envoy's admin /certs answered in the last round (1) or not (0).", []string{"namespace", "pod", "envoy"}, nil)
	probeDurationDesc = prometheus.NewDesc("certdrift_probe_duration_seconds",
		"Duration of each probe, by kind (tls: one handshake).", []string{"kind"}, nil)
	probeErrorsDesc = prometheus.NewDesc("certdrift_probe_errors_total",
		"Probes that failed, by kind (tls, admin, desired) and a closed set of reasons.", []string{"kind", "reason"}, nil)
	kubeErrorsDesc = prometheus.NewDesc("certdrift_kubernetes_request_errors_total",
		"Kubernetes API requests that failed, by HTTP status code (\"error\" when none came back).", []string{"code"}, nil)
	lastRoundDesc = prometheus.NewDesc("certdrift_last_complete_round_timestamp_seconds",
		"When the last complete round of observation and judgement finished.", nil, nil)
	resultAgeDesc = prometheus.NewDesc("certdrift_result_age_seconds",
		"Age of the exposed results at scrape time: now minus the end of the round they come from.", nil, nil)
	roundDurationDesc = prometheus.NewDesc("certdrift_round_duration_seconds",
		"Duration of the last complete round.", nil, nil)
	roundsDesc = prometheus.NewDesc("certdrift_rounds_total",
		"Complete rounds since the process started.", nil, nil)
	buildInfoDesc = prometheus.NewDesc("certdrift_build_info",
		"Build of the running certdrift (value 1).", []string{"version", "revision", "goversion"}, nil)
	reloadOKDesc = prometheus.NewDesc("certdrift_config_last_reload_successful",
		"Whether the last load of the configuration file succeeded (1) or not (0).", nil, nil)
	reloadAtDesc = prometheus.NewDesc("certdrift_config_last_reload_success_timestamp_seconds",
		"When the configuration file was last loaded successfully.", nil, nil)
)

// healthCollector exposes certdrift's own health: per-source and per-Envoy reachability, probe
// durations and errors, freshness of the results, build and configuration state.
type healthCollector struct{ s *Store }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sourceUpDesc, envoyUpDesc, probeDurationDesc, probeErrorsDesc, kubeErrorsDesc,
		lastRoundDesc, resultAgeDesc, roundDurationDesc, roundsDesc, buildInfoDesc, reloadOKDesc, reloadAtDesc} {
		ch <- d
	}
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.s.view()
	for _, u := range v.snap.sourcesUp {
		ch <- prometheus.MustNewConstMetric(sourceUpDesc, prometheus.GaugeValue, boolf(u.up), u.labels...)
	}
	for _, u := range v.snap.envoysUp {
		ch <- prometheus.MustNewConstMetric(envoyUpDesc, prometheus.GaugeValue, boolf(u.up), u.labels...)
	}
	ch <- prometheus.MustNewConstHistogram(probeDurationDesc, v.probeTLS.count, v.probeTLS.sum, v.probeTLS.cumulative(), KindTLS)
	for k, n := range v.probeErrors {
		ch <- prometheus.MustNewConstMetric(probeErrorsDesc, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	for code, n := range v.kubeErrors {
		ch <- prometheus.MustNewConstMetric(kubeErrorsDesc, prometheus.CounterValue, float64(n), code)
	}
	if !v.lastComplete.IsZero() {
		ch <- prometheus.MustNewConstMetric(lastRoundDesc, prometheus.GaugeValue, unix(v.lastComplete))
		ch <- prometheus.MustNewConstMetric(resultAgeDesc, prometheus.GaugeValue, max(0, v.now.Sub(v.lastComplete).Seconds()))
		ch <- prometheus.MustNewConstMetric(roundDurationDesc, prometheus.GaugeValue, v.snap.duration)
	}
	ch <- prometheus.MustNewConstMetric(roundsDesc, prometheus.CounterValue, float64(v.rounds))
	b := c.s.opt.Build
	ch <- prometheus.MustNewConstMetric(buildInfoDesc, prometheus.GaugeValue, 1, b.Version, b.Revision, b.GoVersion)
	if v.reloadKnown {
		ch <- prometheus.MustNewConstMetric(reloadOKDesc, prometheus.GaugeValue, boolf(v.reloadOK))
		if !v.reloadAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(reloadAtDesc, prometheus.GaugeValue, unix(v.reloadAt))
		}
	}
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// unix renders a time as fractional seconds since the epoch, as *_timestamp_seconds want.
func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
