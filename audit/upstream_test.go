package audit

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// TestUpstreamVerifyFailure: Envoy's own /stats say it refuses the certificate an upstream
// presents. The counters only grow, so one sample proves a failure now only together with
// control_plane.connected_state 0 or a cluster that has never completed a handshake
// (ssl.handshake 0); the counters below are the ones Envoy 1.40 showed for a proxy whose xDS
// handshakes failed verification (test/scenarios/eg-ca-rotation).
func TestUpstreamVerifyFailure(t *testing.T) {
	stats := func(kv map[string]uint64) EnvoyView {
		return envoy("gw", &envoystate.Snapshot{AdminURL: "http://127.0.0.1:19000", Stats: envoystate.Stats{Counters: kv}}, nil)
	}
	type want struct {
		Codes    []string // "CODE severity cluster"
		Evidence map[string]string
	}
	cases := map[string]struct {
		reason string
		envoy  EnvoyView
		want   want
	}{
		"XDSRejectsControlPlane": {
			reason: "disconnected from the control plane while its xDS cluster refuses the control plane's chain: the proxy gets no configuration",
			envoy: stats(map[string]uint64{"control_plane.connected_state": 0,
				"cluster.xds_cluster.ssl.fail_verify_error": 3, "cluster.xds_cluster.ssl.connection_error": 3,
				"cluster.xds_cluster.upstream_cx_connect_fail": 3, "cluster.xds_cluster.ssl.handshake": 0,
				"cluster.backend.ssl.fail_verify_error": 0, "listener.0.0.0.0_10443.ssl.fail_verify_error": 0}),
			want: want{Codes: []string{"CA_BUNDLE_GAP critical xds_cluster"}, Evidence: map[string]string{
				"cluster": "xds_cluster", "fail_verify_error": "3", "ssl_connection_error": "3", "upstream_cx_connect_fail": "3",
				"control_plane_connected_state": "0", "ssl_handshake": "0",
				"reason": "Envoy refuses the upstream's certificate and has never completed a TLS handshake with it"}},
		},
		"XDSRejectsControlPlaneAfterConnecting": {
			reason: "connected once (ssl.handshake 1), then disconnected while refusing the control plane's new chain",
			envoy: stats(map[string]uint64{"control_plane.connected_state": 0,
				"cluster.xds_cluster.ssl.fail_verify_error": 2, "cluster.xds_cluster.ssl.handshake": 1}),
			want: want{Codes: []string{"CA_BUNDLE_GAP critical xds_cluster"}, Evidence: map[string]string{
				"cluster": "xds_cluster", "fail_verify_error": "2", "ssl_connection_error": "0", "upstream_cx_connect_fail": "0",
				"control_plane_connected_state": "0", "ssl_handshake": "1",
				"reason": "Envoy reports verification failures on a cluster while disconnected from its control plane"}},
		},
		"RetryPendingNeverVerified": {
			reason: "connected_state reads 1 while a retry is pending (Envoy sets it when the stream starts, before the connection exists): a cluster that never completed a handshake still fails now",
			envoy: stats(map[string]uint64{"control_plane.connected_state": 1,
				"cluster.xds_cluster.ssl.fail_verify_error": 1, "cluster.xds_cluster.upstream_cx_connect_fail": 1, "cluster.xds_cluster.ssl.handshake": 0}),
			want: want{Codes: []string{"CA_BUNDLE_GAP critical xds_cluster"}, Evidence: map[string]string{
				"cluster": "xds_cluster", "fail_verify_error": "1", "ssl_connection_error": "0", "upstream_cx_connect_fail": "1",
				"control_plane_connected_state": "1", "ssl_handshake": "0",
				"reason": "Envoy refuses the upstream's certificate and has never completed a TLS handshake with it"}},
		},
		"StaticEnvoyNeverVerified": {
			reason: "no ADS, but no handshake to the backend ever completed and it was refused: failing as of the last attempt",
			envoy:  stats(map[string]uint64{"cluster.backend.ssl.fail_verify_error": 5, "cluster.backend.ssl.handshake": 0}),
			want: want{Codes: []string{"CA_BUNDLE_GAP critical backend"}, Evidence: map[string]string{
				"cluster": "backend", "fail_verify_error": "5", "ssl_connection_error": "0", "upstream_cx_connect_fail": "0", "ssl_handshake": "0",
				"reason": "Envoy refuses the upstream's certificate and has never completed a TLS handshake with it"}},
		},
		"HandshakeCounterAbsent": {
			reason: "control: without ssl.handshake in the sample, connected_state 1 and an old counter prove nothing",
			envoy: stats(map[string]uint64{"control_plane.connected_state": 1,
				"cluster.xds_cluster.ssl.fail_verify_error": 3}),
		},
		"XDSRejectsControlPlaneSAN": {
			reason: "the chain verifies but no subject_alt_name matches: the hostname case, not a bundle gap",
			envoy: stats(map[string]uint64{"control_plane.connected_state": 0,
				"cluster.xds-grpc.ssl.fail_verify_san": 2, "cluster.xds-grpc.ssl.fail_verify_error": 0}),
			want: want{Codes: []string{"HOSTNAME_MISMATCH critical xds-grpc"}},
		},
		"ReconnectedAfterOldFailure": {
			reason: "control: the counter stays non-zero after the control plane caught up; connected again, nothing fails now",
			envoy: stats(map[string]uint64{"control_plane.connected_state": 1,
				"cluster.xds_cluster.ssl.fail_verify_error": 3, "cluster.xds_cluster.ssl.handshake": 1}),
		},
		"DisconnectedWithoutVerifyFailure": {
			reason: "control: a control plane that is down (connection refused) is no certificate failure",
			envoy: stats(map[string]uint64{"control_plane.connected_state": 0,
				"cluster.xds_cluster.upstream_cx_connect_fail": 9, "cluster.xds_cluster.ssl.fail_verify_error": 0}),
		},
		"StaticEnvoyOldFailure": {
			reason: "no ADS stream, so no connected_state: one sample of a counter cannot say whether the failure is still happening",
			envoy:  stats(map[string]uint64{"cluster.backend.ssl.fail_verify_error": 5, "cluster.backend.ssl.handshake": 4}),
		},
		"ListenerRejectsClients": {
			reason: "a listener's verification failures are its clients' certificates, not a failing connection of this Envoy",
			envoy: stats(map[string]uint64{"control_plane.connected_state": 0,
				"listener.0.0.0.0_10443.ssl.fail_verify_error": 4}),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := Run(Inputs{Envoys: []EnvoyView{tc.envoy}}, config.DefaultPolicy, now)
			var g want
			for _, f := range r.Findings {
				g.Codes = append(g.Codes, string(f.Code)+" "+f.Severity.String()+" "+f.Evidence["cluster"])
				if f.Code == CABundleGap {
					g.Evidence = f.Evidence
				}
				if f.Subject.Envoy != "gw" {
					t.Errorf("%s: subject %+v, want Envoy gw", f.Code, f.Subject)
				}
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				for _, f := range r.Findings {
					t.Logf("%s %s: %s", f.Code, f.Severity, f.Message)
				}
				t.Errorf("%s\n(-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
