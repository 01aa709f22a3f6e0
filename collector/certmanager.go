package collector

import (
	dto "github.com/prometheus/client_model/go"

	"github.com/certdrift/certdrift/ref"
)

// cert-manager's Certificates beside the three views: what cert-manager says (revision, Ready,
// renewal time) and which revision each view holds, so that a dashboard shows "cert-manager
// renewed, the Secret was updated, Envoy X still serves revision N-1". Labels name objects that
// exist: a Certificate, its Secret (source) and the bound Envoys.
var (
	cmCertLabels     = newLabelIndex("namespace", "certificate", "source")
	cmRevisionLabels = newLabelIndex("view", "namespace", "certificate", "source", "envoy")
)

var (
	cmPresent = newFamily("certdrift_certmanager_present",
		"Whether the API server serves cert-manager's Certificates (1) or not (0: the CRDs are not installed, which is not an error). Absent in local mode and when reading cert-manager is turned off.",
		dto.MetricType_GAUGE)
	cmUp = newFamily("certdrift_certmanager_up",
		"Whether cert-manager's Certificates and CertificateRequests could be listed in the last round (0: RBAC or the API server refused; the UNREACHABLE finding says why).",
		dto.MetricType_GAUGE)
	cmCertRevision = newFamily("certdrift_certmanager_certificate_revision",
		"A cert-manager Certificate's status.revision: how many times it has been issued.",
		dto.MetricType_GAUGE, cmCertLabels.names)
	cmCertReady = newFamily("certdrift_certmanager_certificate_ready",
		"Whether a cert-manager Certificate's Ready condition is True (1) or not (0: False, Unknown or absent).",
		dto.MetricType_GAUGE, cmCertLabels.names)
	cmCertRenewal = newFamily("certdrift_certmanager_certificate_renewal_timestamp_seconds",
		"When cert-manager will renew a Certificate (status.renewalTime).",
		dto.MetricType_GAUGE, cmCertLabels.names)
	cmRevision = newFamily("certdrift_certmanager_revision",
		"The cert-manager revision each view holds of a Certificate: desired (its Secret), loaded or served (per Envoy bound to the Secret). 0: a leaf no CertificateRequest in cert-manager's history issued.",
		dto.MetricType_GAUGE, cmRevisionLabels.names)
)

// renderCertManager renders the round's cert-manager judgement (audit.Report.CertManager) into
// rs: a Certificate's own series with the shard that owns its Secret, the revision an Envoy
// holds with the shard that owns the Envoy (it alone reads that Envoy: gather.KubeOptions.Shard).
func renderCertManager(rs *rowSet, r Round, shard Shard) {
	cm := r.Inputs.CertManager
	if !cm.Read {
		return
	}
	rs.sample(cmPresent, nil, nil, boolf(cm.Present))
	if !cm.Present {
		return
	}
	rs.sample(cmUp, nil, nil, boolf(cm.Err == nil))
	for _, st := range r.Report.CertManager {
		if shard.Owns(ref.SourceKey(st.Source)) {
			base := cmCertLabels.values("namespace", st.Namespace, "certificate", st.Name, "source", st.Source)
			rs.sample(cmCertRevision, cmCertLabels.names, base, float64(st.Revision))
			rs.sample(cmCertReady, cmCertLabels.names, base, boolf(st.Ready == "True"))
			if !st.RenewalTime.IsZero() {
				rs.sample(cmCertRenewal, cmCertLabels.names, base, unixNano(st.RenewalTime.UnixNano()))
			}
			if st.SecretRevision > 0 {
				rs.sample(cmRevision, cmRevisionLabels.names, cmRevisionLabels.values("view", "desired", "namespace", st.Namespace,
					"certificate", st.Name, "source", st.Source, "envoy", ""), float64(st.SecretRevision))
			}
		}
		seen := map[string]bool{}
		for _, e := range st.Envoys {
			if !shard.Owns(e.Envoy) {
				continue
			}
			// One series per Envoy and view: an Envoy holding two copies (a lingering
			// context) shows the newest revision it holds.
			k := e.View + "\x00" + e.Envoy
			if seen[k] {
				continue
			}
			seen[k] = true
			rev := 0
			for _, o := range st.Envoys {
				if o.View == e.View && o.Envoy == e.Envoy {
					rev = max(rev, o.Revision)
				}
			}
			rs.sample(cmRevision, cmRevisionLabels.names, cmRevisionLabels.values("view", e.View, "namespace", st.Namespace,
				"certificate", st.Name, "source", st.Source, "envoy", e.Envoy), float64(rev))
		}
	}
}
