package collector

import (
	"maps"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
)

var (
	sourceUp = newFamily("certdrift_source_up",
		"Whether a data source (files, kubernetes) could be read in the last round (1) or not (0).", dto.MetricType_GAUGE, sourceLabels)
	envoyUpFamily = newFamily("certdrift_envoy_admin_up",
		"Whether the Envoy's admin /certs answered in the last round (1) or not (0).", dto.MetricType_GAUGE, envoyUpLabels.names)
	probeDuration = newFamily("certdrift_probe_duration_seconds",
		"Duration of each probe, by kind (tls: one handshake).", dto.MetricType_HISTOGRAM, kindLabels)
	probeErrorsFamily = newFamily("certdrift_probe_errors_total",
		"Probes that failed, by kind (tls, admin, desired) and a closed set of reasons.", dto.MetricType_COUNTER, probeErrorLabels)
	kubeRequestsFamily = newFamily("certdrift_kubernetes_requests_total",
		"Kubernetes API requests, by HTTP status code (\"error\" when none came back).", dto.MetricType_COUNTER, codeLabels)
	kubeErrorsFamily = newFamily("certdrift_kubernetes_request_errors_total",
		"Kubernetes API requests that failed, by HTTP status code (\"error\" when none came back).", dto.MetricType_COUNTER, codeLabels)
	lastRound = newFamily("certdrift_last_complete_round_timestamp_seconds",
		"When the last complete round of observation and judgement finished.", dto.MetricType_GAUGE)
	resultAge = newFamily("certdrift_result_age_seconds",
		"Age of the exposed results at scrape time: now minus the end of the round they come from.", dto.MetricType_GAUGE)
	roundDuration = newFamily("certdrift_round_duration_seconds",
		"Duration of the last complete round.", dto.MetricType_GAUGE)
	roundsFamily = newFamily("certdrift_rounds_total",
		"Complete rounds since the process started.", dto.MetricType_COUNTER)
	buildInfoFamily = newFamily("certdrift_build_info",
		"Build of the running certdrift (value 1).", dto.MetricType_GAUGE, buildLabels.names)
	reloadOKFamily = newFamily("certdrift_config_last_reload_successful",
		"Whether the last load of the configuration file succeeded (1) or not (0).", dto.MetricType_GAUGE)
	reloadAtFamily = newFamily("certdrift_config_last_reload_success_timestamp_seconds",
		"When the configuration file was last loaded successfully.", dto.MetricType_GAUGE)
)

var (
	sourceLabels     = labelSet("source")
	envoyUpLabels    = newLabelIndex("namespace", "pod", "envoy")
	kindLabels       = labelSet("kind")
	probeErrorLabels = labelSet("kind", "reason")
	codeLabels       = labelSet("code")
	buildLabels      = newLabelIndex("version", "revision", "goversion")
)

// renderSourcesUp renders per-source reachability into the round object.
func renderSourcesUp(rs *rowSet, up map[string]bool) {
	for _, name := range slices.Sorted(maps.Keys(up)) {
		rs.sample(sourceUp, sourceLabels, []string{name}, boolf(up[name]))
	}
}

// envoyUp renders one Envoy's admin reachability into the round object.
func envoyUp(rs *rowSet, id identity, envoy string, up bool) {
	rs.sample(envoyUpFamily, envoyUpLabels.names, envoyUpLabels.values("namespace", id.namespace, "pod", id.pod, "envoy", envoy), boolf(up))
}

// live renders what changes with the clock or between rounds without a round: drift ages,
// convergence and probe histograms, error counters, freshness of the results, build and
// configuration state. It is small (tens of series plus the stale bindings) and rendered per
// scrape, by the same functions as the objects.
func (s *Store) live() *rowSet {
	now := s.opt.Now()
	rs := &rowSet{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.drift {
		rs.sample(driftAge, driftLabels.names, d.values, max(0, now.Sub(d.since).Seconds()))
	}
	rs.histogram(convergenceFamily, nil, nil, s.convergence)
	rs.histogram(probeDuration, kindLabels, []string{KindTLS}, s.probeTLS)
	for _, k := range slices.SortedFunc(maps.Keys(s.probeErrors), func(a, b [2]string) int {
		return cmpStrings(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1])
	}) {
		rs.sample(probeErrorsFamily, probeErrorLabels, []string{k[0], k[1]}, float64(s.probeErrors[k]))
	}
	for _, code := range slices.Sorted(maps.Keys(s.kubeRequests)) {
		rs.sample(kubeRequestsFamily, codeLabels, []string{code}, float64(s.kubeRequests[code]))
	}
	for _, code := range slices.Sorted(maps.Keys(s.kubeErrors)) {
		rs.sample(kubeErrorsFamily, codeLabels, []string{code}, float64(s.kubeErrors[code]))
	}
	if !s.lastComplete.IsZero() {
		rs.sample(lastRound, nil, nil, unix(s.lastComplete))
		rs.sample(resultAge, nil, nil, max(0, now.Sub(s.lastComplete).Seconds()))
		rs.sample(roundDuration, nil, nil, s.duration)
	}
	rs.sample(roundsFamily, nil, nil, float64(s.rounds))
	b := s.opt.Build
	rs.sample(buildInfoFamily, buildLabels.names, buildLabels.values("version", b.Version, "revision", b.Revision, "goversion", b.GoVersion), 1)
	if s.reloadKnown {
		rs.sample(reloadOKFamily, nil, nil, boolf(s.reloadOK))
		if !s.reloadAt.IsZero() {
			rs.sample(reloadAtFamily, nil, nil, unix(s.reloadAt))
		}
	}
	return rs
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// unix renders a time as fractional seconds since the epoch, as *_timestamp_seconds want.
func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
