package audit

import (
	"fmt"
	"maps"
	"sort"
	"strings"
)

// checkUpstreamVerify reports an Envoy that refuses the certificate an upstream presents, from
// Envoy's own /stats: the one view certdrift has of a control plane that is not an Envoy (Envoy
// Gateway's, istiod) and that it neither reads nor handshakes.
//
// The ssl.fail_verify_* counters only grow, so one sample cannot say that a failure is still
// happening: a proxy that failed once during a rotation and reconnected keeps a non-zero counter
// for life. Two things in the same sample can:
//   - ssl.handshake 0 on the cluster: no TLS handshake to that upstream has ever completed, so
//     every connection so far failed and the refusals are the latest word;
//   - control_plane.connected_state 0: the ADS stream is down now, and a cluster that has
//     refused its peer's certificate is why (Envoy's /stats do not name the ADS cluster, so
//     every cluster with verification failures is reported while the stream is down).
//
// connected_state 1 does not prove the stream is up: Envoy sets it when it starts a stream,
// before the connection exists, so it reads 1 for as long as each retry is pending (seen on Envoy
// 1.36.2 and 1.40.0; test/e2e TestXDSVerifyFailureWhileRetrying). A proxy that has never got
// through is therefore judged by its handshakes, whatever the gauge reads at that instant. A
// cluster that did complete a handshake once and fails again is seen while connected_state
// reads 0, which is most of the time between retries.
func (a *auditor) checkUpstreamVerify(ev *EnvoyView) {
	st := ev.Admin.Stats
	connected, ads := st.ControlPlaneConnected()
	failures := st.VerifyFailures()
	// neverVerified: the cluster's ssl.handshake is there and 0 (an absent counter proves nothing).
	neverVerified := func(scope string) bool {
		n, ok := st.Counters[scope+".ssl.handshake"]
		return ok && n == 0
	}
	scopes := make([]string, 0, len(failures))
	for scope := range failures {
		if strings.HasPrefix(scope, "cluster.") && (neverVerified(scope) || ads && !connected) {
			scopes = append(scopes, scope)
		}
	}
	sort.Strings(scopes)
	for _, scope := range scopes {
		f := failures[scope]
		cluster := strings.TrimPrefix(scope, "cluster.")
		base := map[string]string{
			"cluster":                  cluster,
			"ssl_handshake":            fmt.Sprint(st.Counters[scope+".ssl.handshake"]),
			"ssl_connection_error":     fmt.Sprint(f.ConnectionError),
			"upstream_cx_connect_fail": fmt.Sprint(f.ConnectFail),
			"reason":                   "Envoy reports verification failures on a cluster while disconnected from its control plane",
		}
		// The message names what makes this one sample proof of a failure now.
		before, after := "", ""
		if ads {
			base["control_plane_connected_state"] = "0"
			if connected {
				base["control_plane_connected_state"] = "1"
			}
		}
		if ads && !connected {
			before = " is not connected to its control plane and"
		}
		if neverVerified(scope) {
			after = " and has never completed a TLS handshake with it"
			base["reason"] = "Envoy refuses the upstream's certificate and has never completed a TLS handshake with it"
		}
		s := Subject{Envoy: ev.Config.Name}
		if ev.Pod != nil {
			s.Workload = ev.Pod.Workload
		}
		if f.Error > 0 {
			evd := maps.Clone(base)
			evd["fail_verify_error"] = fmt.Sprint(f.Error)
			a.add(Finding{Code: CABundleGap, Severity: Critical, Subject: s, Evidence: evd,
				Message: fmt.Sprintf("Envoy %s%s refused the certificate chain of cluster %q %s (ssl.fail_verify_error)%s: its trust bundle for that cluster does not verify the peer's chain",
					ev.Config.Name, before, cluster, plural(int(f.Error), "time"), after),
				Advice: "the peer presents a leaf from a CA this Envoy's validation context does not hold (during a CA rotation: one side is on the new CA, the other not yet); give the bundle both CAs or bring the peer onto the CA the bundle holds (Envoy Gateway: sync or restart the control plane after certgen); while it fails, an Envoy whose ADS stream uses this cluster gets no configuration updates"})
		}
		if f.SAN > 0 {
			evd := maps.Clone(base)
			evd["fail_verify_san"] = fmt.Sprint(f.SAN)
			a.add(Finding{Code: HostnameMismatch, Severity: Critical, Subject: s, Evidence: evd,
				Message: fmt.Sprintf("Envoy %s%s refused the certificate of cluster %q %s because no subject alternative name matched (ssl.fail_verify_san)%s",
					ev.Config.Name, before, cluster, plural(int(f.SAN), "time"), after),
				Advice: "the peer's leaf does not carry the name the cluster's match_typed_subject_alt_names asks for: reissue the leaf with that name or fix the matcher; while it fails, an Envoy whose ADS stream uses this cluster gets no configuration updates"})
		}
	}
}
