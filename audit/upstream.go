package audit

import (
	"fmt"
	"maps"
	"sort"
	"strings"
)

// checkUpstreamVerify reports an Envoy that refuses the certificate its control plane presents,
// from Envoy's own /stats: the one view certdrift has of a control plane that is not an Envoy
// (Envoy Gateway's, istiod) and that it neither reads nor handshakes.
//
// The ssl.fail_verify_* counters only grow, so one sample cannot say that a failure is still
// happening: a proxy that failed once during a rotation and reconnected keeps a non-zero counter
// for life. The gauge control_plane.connected_state can: 0 means the ADS stream is down now, and
// a cluster that has refused its peer's certificate is why. Envoy's /stats do not name the ADS
// cluster, so every cluster with verification failures is reported while the stream is down; an
// Envoy without ADS has no connected_state and is not judged here (a failing static upstream
// needs two samples, which a one-shot audit does not have).
func (a *auditor) checkUpstreamVerify(ev *EnvoyView) {
	st := ev.Admin.Stats
	connected, ok := st.ControlPlaneConnected()
	if !ok || connected {
		return
	}
	failures := st.VerifyFailures()
	scopes := make([]string, 0, len(failures))
	for scope := range failures {
		if strings.HasPrefix(scope, "cluster.") {
			scopes = append(scopes, scope)
		}
	}
	sort.Strings(scopes)
	for _, scope := range scopes {
		f := failures[scope]
		cluster := strings.TrimPrefix(scope, "cluster.")
		base := map[string]string{
			"cluster":                       cluster,
			"control_plane_connected_state": "0",
			"ssl_connection_error":          fmt.Sprint(f.ConnectionError),
			"upstream_cx_connect_fail":      fmt.Sprint(f.ConnectFail),
			"reason":                        "Envoy reports verification failures on a cluster while disconnected from its control plane",
		}
		s := Subject{Envoy: ev.Config.Name}
		if ev.Pod != nil {
			s.Workload = ev.Pod.Workload
		}
		if f.Error > 0 {
			evd := maps.Clone(base)
			evd["fail_verify_error"] = fmt.Sprint(f.Error)
			a.add(Finding{Code: CABundleGap, Severity: Critical, Subject: s, Evidence: evd,
				Message: fmt.Sprintf("Envoy %s is not connected to its control plane and refused the certificate chain of cluster %q %s (ssl.fail_verify_error): its trust bundle for that cluster does not verify the peer's chain",
					ev.Config.Name, cluster, plural(int(f.Error), "time")),
				Advice: "the peer presents a leaf from a CA this Envoy's validation context does not hold (during a CA rotation: one side is on the new CA, the other not yet); give the bundle both CAs or bring the peer onto the CA the bundle holds (Envoy Gateway: sync or restart the control plane after certgen); while it fails, an Envoy whose ADS stream uses this cluster gets no configuration updates"})
		}
		if f.SAN > 0 {
			evd := maps.Clone(base)
			evd["fail_verify_san"] = fmt.Sprint(f.SAN)
			a.add(Finding{Code: HostnameMismatch, Severity: Critical, Subject: s, Evidence: evd,
				Message: fmt.Sprintf("Envoy %s is not connected to its control plane and refused the certificate of cluster %q %s because no subject alternative name matched (ssl.fail_verify_san)",
					ev.Config.Name, cluster, plural(int(f.SAN), "time")),
				Advice: "the peer's leaf does not carry the name the cluster's match_typed_subject_alt_names asks for: reissue the leaf with that name or fix the matcher; while it fails, an Envoy whose ADS stream uses this cluster gets no configuration updates"})
		}
	}
}
