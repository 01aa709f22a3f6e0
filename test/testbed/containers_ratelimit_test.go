package testbed

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestIsRatelimitImage(t *testing.T) {
	cases := map[string]struct {
		image string
		want  bool
	}{
		"EnvoyGatewayDefault": {image: "docker.io/envoyproxy/ratelimit:8fe6ea42@sha256:a61547259607d40aff153050c2a87873ca1676d1d9f5f06937d412000dcc2df1", want: true},
		"Bare":                {image: "ratelimit", want: true},
		"Gateway":             {image: "docker.io/envoyproxy/gateway:v1.9.1"},
		"Envoy":               {image: "envoyproxy/envoy:distroless-v1.39.1"},
		"OtherRatelimiter":    {image: "example.com/my-ratelimit:1"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := isRatelimitImage(c.image); got != c.want {
				t.Errorf("isRatelimitImage(%q) = %v, want %v", c.image, got, c.want)
			}
		})
	}
}

func TestRatelimitEnv(t *testing.T) {
	relay := netip.MustParseAddrPort("127.2.0.1:40001")
	var asked []string
	pn := podNet{podIP: netip.MustParseAddr("127.0.1.5"), localIP: netip.MustParseAddr("127.1.1.5"),
		resolve: func(host string, port int) (netip.AddrPort, bool) {
			asked = append(asked, host)
			if strings.HasSuffix(host, ".svc") || strings.HasSuffix(host, ".svc.cluster.local") {
				return relay, true
			}
			return netip.AddrPort{}, false
		}}
	cases := map[string]struct {
		in, want map[string]string
		asked    []string
	}{
		"EnvoyGateway": {
			in: map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "REDIS_URL": "redis.rl.svc.cluster.local:6379",
				"GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "LOG_LEVEL": "info", "PROMETHEUS_ADDR": ":19001", "ADMIN": "127.0.0.1:9000"},
			want: map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": relay.String(), "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "envoy-gateway",
				"REDIS_URL": relay.String(), "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "LOG_LEVEL": "info",
				"PROMETHEUS_ADDR": "127.0.1.5:19001", "ADMIN": "127.1.1.5:9000",
				"HOST": "127.0.1.5", "GRPC_HOST": "127.0.1.5", "DEBUG_HOST": "127.0.1.5"},
			asked: []string{"envoy-gateway.envoy-gateway-system.svc", "redis.rl.svc.cluster.local"},
		},
		"SANKeptAndHostsMoved": {
			in: map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway.other:18001", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "cp.example",
				"HOST": "localhost", "GRPC_HOST": "0.0.0.0"},
			want: map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": relay.String(), "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "cp.example",
				"HOST": "127.1.1.5", "GRPC_HOST": "127.0.1.5", "DEBUG_HOST": "127.0.1.5"},
			asked: []string{"envoy-gateway.other.svc"},
		},
		// Control: addresses that are not Service names stay as they are.
		"NotServices": {
			in: map[string]string{"REDIS_URL": "10.0.0.7:6379", "OTEL": "collector.example.com:4317", "PATHLIKE": "/var/run/x.sock"},
			want: map[string]string{"REDIS_URL": "10.0.0.7:6379", "OTEL": "collector.example.com:4317", "PATHLIKE": "/var/run/x.sock",
				"HOST": "127.0.1.5", "GRPC_HOST": "127.0.1.5", "DEBUG_HOST": "127.0.1.5"},
			asked: []string{"collector.example.com"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			asked = nil
			got := ratelimitEnv(c.in, pn, "envoy-gateway-system")
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.asked, asked, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("names resolved (-want +got):\n%s", diff)
			}
		})
	}
}
