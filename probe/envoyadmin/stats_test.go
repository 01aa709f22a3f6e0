package envoyadmin

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/probe/envoystate"
)

func TestParseStatsTextSamples(t *testing.T) {
	// The fixture strings together lines from several Envoys; each sample is parsed on its own.
	raw := string(readTestdata(t, "fixtures/stats_text_days_until_first_cert_expiring_samples.txt"))
	var got []string
	for _, line := range strings.Split(raw, "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		st, err := ParseStats([]byte(line))
		if err != nil {
			t.Fatalf("ParseStats(%q): %v", line, err)
		}
		d, ok := st.DaysUntilFirstCertExpiring()
		hs := st.SSLHandshakes()
		got = append(got, strings.TrimSpace(line)+" => "+fmtDays(d, ok)+" "+fmtHS(hs))
	}
	want := []string{
		"server.days_until_first_cert_expiring: 0 => 0 days map[]",
		"server.days_until_first_cert_expiring: 4294967295 => none map[]",
		"server.days_until_first_cert_expiring: 2147483647 => none map[]",
		"listener.0.0.0.0_15000.ssl.handshake: 1 => none map[listener.0.0.0.0_15000:{Handshake:1 ConnectionError:0}]",
		"cluster.cds_egress_howto-k8s-mtls-sds-based_blue_howto-k8s-mtls-sds-based_http_8080.ssl.handshake: 1 => none " +
			"map[cluster.cds_egress_howto-k8s-mtls-sds-based_blue_howto-k8s-mtls-sds-based_http_8080:{Handshake:1 ConnectionError:0}]",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// The whole file at once: comments skipped, the later sample of a name wins.
	st, err := ParseStats([]byte(raw))
	if err != nil {
		t.Fatalf("ParseStats(whole file): %v", err)
	}
	if v := st.Counters["server.days_until_first_cert_expiring"]; v != 2147483647 {
		t.Errorf("days = %d, want the last sample 2147483647", v)
	}
}

func fmtDays(d uint64, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprintf("%d days", d)
}

func fmtHS(h map[string]envoystate.Handshakes) string { return fmt.Sprintf("%+v", h) }

func TestParseStatsPrometheusRefused(t *testing.T) {
	_, err := ParseStats(readTestdata(t, "fixtures/stats_prometheus_days_until_first_cert_expiring_samples.txt"))
	if !errors.Is(err, ErrPrometheusFormat) {
		t.Fatalf("error = %v, want ErrPrometheusFormat", err)
	}
	// Without the comment lines too.
	_, err = ParseStats([]byte("envoy_server_days_until_first_cert_expiring{} 82\n"))
	if !errors.Is(err, ErrPrometheusFormat) {
		t.Fatalf("error = %v, want ErrPrometheusFormat", err)
	}
}

func TestParseStatsReal(t *testing.T) {
	for _, v := range realVersions {
		for _, file := range []string{"stats.txt", "stats_filtered.txt"} {
			t.Run(v+"/"+file, func(t *testing.T) {
				st, err := ParseStats(readTestdata(t, "real-"+v+"/"+file))
				if err != nil {
					t.Fatalf("ParseStats: %v", err)
				}
				if d, ok := st.DaysUntilFirstCertExpiring(); !ok || d != 4 && d != 5 {
					t.Errorf("days until first expiry = %d, %v; want 4 or 5 (record.sh's inline cert lives 5 days)", d, ok)
				}
				wantKRF := map[string]uint64{"kubernetes_default/sds-cert": 0, "kubernetes_default/sds-ca": 0}
				if diff := cmp.Diff(wantKRF, st.KeyRotationFailed()); diff != "" {
					t.Errorf("KeyRotationFailed (-want +got):\n%s", diff)
				}
				if got := envoystate.SanitizeStatName("kubernetes://default/sds-cert"); got != "kubernetes_default/sds-cert" {
					t.Errorf("SanitizeStatName = %q, which does not match Envoy's stat names", got)
				}
				upd := st.SDSUpdates()["kubernetes_default/sds-cert"]
				if upd.Success != 1 || upd.Rejected != 0 || upd.LastUpdate.Year() != 2026 {
					t.Errorf("SDS updates of sds-cert = %+v, want 1 success at record time", upd)
				}
				const scope = "listener.127.0.0.1_29902"
				if diff := cmp.Diff(map[string]uint64{scope + ".server_ssl_socket_factory": 2}, st.SSLContextUpdatesBySDS()); diff != "" {
					t.Errorf("SSLContextUpdatesBySDS (-want +got):\n%s", diff)
				}
				// record.sh makes three handshakes; the static chain requires a client
				// certificate, so curl's attempt there fails.
				if h := st.SSLHandshakes()[scope]; h.Handshake != 2 {
					t.Errorf("handshakes = %+v, want 2 completed", h)
				}
				exp := st.CertExpirations()
				for _, name := range []string{"kubernetes://default/sds-cert", "kubernetes://default/sds-ca", "static-inline-secret"} {
					if e := exp[scope+"/"+name]; e.Year() != 2026 {
						t.Errorf("expiration of %s = %v, want a 2026 date (have %v)", name, e, keysOf(exp))
					}
				}
			})
		}
	}
}

func TestStatsFilterMatchesRecordScript(t *testing.T) {
	script := string(readTestdata(t, "record/record.sh"))
	if !strings.Contains(script, "STATS_FILTER='"+statsFilter+"'") {
		t.Errorf("record.sh's STATS_FILTER differs from statsFilter %q: update the script so recordings show what the client asks for", statsFilter)
	}
	re := regexp.MustCompile(statsFilter)
	for _, name := range []string{
		"sds.kubernetes://foo.bar.key_rotation_failed", "server.days_until_first_cert_expiring", "server.uptime",
		"cluster.x.client_ssl_socket_factory.ssl_context_update_by_sds", "listener.0.0.0.0_443.ssl.handshake",
		"listener.0.0.0.0_443.ssl.certificate.ns/name.expiration_unix_time_seconds",
		"control_plane.connected_state", "cluster.xds_cluster.upstream_cx_connect_fail", "cluster.xds_cluster.ssl.fail_verify_error",
	} {
		if !re.MatchString(name) {
			t.Errorf("statsFilter does not keep %q", name)
		}
	}
	for _, name := range []string{"http.admin.downstream_rq_2xx", "sds.x.update_duration", "sds.x.version_text",
		"control_plane.rate_limit_enforced", "cluster.x.upstream_cx_total", "listener.x.upstream_cx_connect_fail"} {
		if re.MatchString(name) {
			t.Errorf("statsFilter keeps %q, which certdrift does not read", name)
		}
	}
}

func TestParseStatsEdgeCases(t *testing.T) {
	cases := map[string]struct {
		body    string
		want    map[string]uint64
		wantErr string
	}{
		"SecretNameWithDotsAndColons": {
			body: "sds.kubernetes://ns/foo.example.com.key_rotation_failed: 3\n",
			want: map[string]uint64{"sds.kubernetes://ns/foo.example.com.key_rotation_failed": 3},
		},
		"HistogramsAndTextSkipped": {
			body: "a.b: 1\nh.x: P0(nan,0) P25(nan,0)\nsds.x.version_text: \"abc: def\"\nh.y: No recorded values\n",
			want: map[string]uint64{"a.b": 1},
		},
		"CRLFAndIndent": {body: "  a: 1\r\nb: 2\r\n", want: map[string]uint64{"a": 1, "b": 2}},
		"Empty":         {body: "", want: map[string]uint64{}},
		"Garbage":       {body: "<html>\n<body>oops</body>\n", wantErr: "no \"name: value\" line", want: map[string]uint64{}},
		"NegativeIgnored": {
			body: "a: -1\nb: 2\n", want: map[string]uint64{"b": 2},
		},
		"HugeValue": {body: "a: 18446744073709551615\n", want: map[string]uint64{"a": 18446744073709551615}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st, err := ParseStats([]byte(tc.body))
			if tc.wantErr == "" && err != nil {
				t.Fatalf("ParseStats: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error = %v, want %q", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, st.Counters); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	st, _ := ParseStats([]byte("sds.kubernetes://ns/foo.example.com.key_rotation_failed: 3\nsds.a.b.update_rejected: 2\n"))
	if diff := cmp.Diff(map[string]uint64{"kubernetes://ns/foo.example.com": 3}, st.KeyRotationFailed()); diff != "" {
		t.Errorf("KeyRotationFailed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]envoystate.SDSUpdate{"a.b": {Rejected: 2}}, st.SDSUpdates()); diff != "" {
		t.Errorf("SDSUpdates (-want +got):\n%s", diff)
	}
}

// TestStatsVerifyFailures reads the lines Envoy 1.40.0 and 1.36.2 printed for an ADS cluster
// whose server presented a certificate from a CA outside its validation context (run by hand
// against openssl s_server, 2026-11-26), and a static Envoy, which has no connected_state.
func TestStatsVerifyFailures(t *testing.T) {
	st, err := ParseStats([]byte(`cluster.my_xds.ssl.connection_error: 0
cluster.my_xds.ssl.fail_verify_cert_hash: 0
cluster.my_xds.ssl.fail_verify_error: 6
cluster.my_xds.ssl.fail_verify_no_cert: 0
cluster.my_xds.ssl.fail_verify_san: 0
cluster.my_xds.ssl.handshake: 0
cluster.my_xds.upstream_cx_connect_fail: 6
control_plane.connected_state: 0
listener.0.0.0.0_443.ssl.fail_verify_san: 2
`))
	if err != nil {
		t.Fatal(err)
	}
	if connected, ok := st.ControlPlaneConnected(); connected || !ok {
		t.Errorf("ControlPlaneConnected() = %v, %v; want false, true", connected, ok)
	}
	want := map[string]envoystate.VerifyFailures{
		"cluster.my_xds":       {Error: 6, ConnectFail: 6},
		"listener.0.0.0.0_443": {SAN: 2},
	}
	if diff := cmp.Diff(want, st.VerifyFailures()); diff != "" {
		t.Errorf("VerifyFailures() (-want +got):\n%s", diff)
	}
	static, err := ParseStats([]byte("cluster.up.ssl.fail_verify_error: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := static.ControlPlaneConnected(); ok {
		t.Errorf("ControlPlaneConnected() on an Envoy without ADS: ok = true, want false (no gauge, nothing to conclude)")
	}
}
