package collector

import (
	"github.com/prometheus/client_golang/prometheus"
)

// certLabels join the views: the same certificate (fingerprint_sha256 on the _info series) can be
// followed from a desired source to each Envoy that loaded it and each endpoint/SNI serving it.
// location is where the view found it: the desired file (or merged item), the SDS secret name or
// certificate file Envoy reports, or the address handshaken. Every label costs bytes on each of
// three series per certificate, and the desired view alone may hold 10,000 Secrets, so the set
// is minimal: no pod (envoy is "namespace/pod" in Kubernetes mode) and the merged item folded
// into source.
var certLabels = []string{"view", "namespace", "source", "envoy", "location", "sni"}

var (
	certNotBeforeDesc = prometheus.NewDesc("certdrift_certificate_not_before_timestamp_seconds",
		"Start of the certificate's validity in the loaded and served views.", certLabels, nil)
	certNotAfterDesc = prometheus.NewDesc("certdrift_certificate_not_after_timestamp_seconds",
		"End of the certificate's validity, per view (desired, loaded, served).", certLabels, nil)
	certInfoDesc = prometheus.NewDesc("certdrift_certificate_info",
		"Identity of the certificate seen in a view; fingerprint_sha256 is empty when Envoy's /certs named a certificate seen in no other view.",
		append(append([]string{}, certLabels...), "fingerprint_sha256", "serial", "subject", "issuer"), nil)
)

// certificateCollector exposes the leaf certificate of every view. It reads a fixed snapshot
// when snap is set (the per-round cache of Store.Gatherer), else the store's current one.
type certificateCollector struct {
	s    *Store
	snap *snapshot
}

func (c certificateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- certNotBeforeDesc
	ch <- certNotAfterDesc
	ch <- certInfoDesc
}

func (c certificateCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.snap
	if snap == nil {
		snap = c.s.current()
	}
	for _, cs := range snap.certs {
		// The desired view has no not-before: nothing alerts on a Secret's start of validity
		// (NOT_YET_VALID is a finding), and at 10,000 Secrets it was 1.5 MB of every scrape.
		// Loaded and served keep it: it tells an old leaf from a new one at a glance.
		if !cs.notBefore.IsZero() && cs.labels[0] != "desired" {
			ch <- prometheus.MustNewConstMetric(certNotBeforeDesc, prometheus.GaugeValue, unix(cs.notBefore), cs.labels...)
		}
		if !cs.notAfter.IsZero() {
			ch <- prometheus.MustNewConstMetric(certNotAfterDesc, prometheus.GaugeValue, unix(cs.notAfter), cs.labels...)
		}
		ch <- prometheus.MustNewConstMetric(certInfoDesc, prometheus.GaugeValue, 1,
			append(append(make([]string, 0, len(cs.labels)+4), cs.labels...), cs.fingerprint, cs.serial, cs.subject, cs.issuer)...)
	}
}
