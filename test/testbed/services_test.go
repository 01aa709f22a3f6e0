package testbed

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"
)

func TestParseServiceHost(t *testing.T) {
	r := newServiceRouter(nil, slog.New(slog.DiscardHandler))
	cases := map[string]struct {
		reason, in string
		want       serviceName
		ok         bool
	}{
		"FQDN":       {reason: "the name Envoy Gateway writes", in: "envoy-gateway.envoy-gateway-system.svc.cluster.local", want: serviceName{"envoy-gateway-system", "envoy-gateway"}, ok: true},
		"Rooted":     {reason: "a trailing dot is the same name", in: "web.ns.svc.cluster.local.", want: serviceName{"ns", "web"}, ok: true},
		"Short":      {reason: "<name>.<namespace>.svc resolves in a pod too", in: "web.ns.svc", want: serviceName{"ns", "web"}, ok: true},
		"Case":       {reason: "DNS is case-insensitive", in: "Web.NS.svc.Cluster.Local", want: serviceName{"ns", "web"}, ok: true},
		"NoSvc":      {reason: "two labels are a search-path name, not resolved", in: "web.ns", ok: false},
		"PodDNS":     {reason: "a pod name under a Service is not a Service", in: "pod-0.web.ns.svc.cluster.local", ok: false},
		"OtherZone":  {reason: "another domain is left alone", in: "web.ns.svc.example.com", ok: false},
		"IP":         {reason: "an address is not a name", in: "127.0.0.1", ok: false},
		"EmptyLabel": {reason: "empty labels are not a Service", in: ".ns.svc.cluster.local", ok: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := r.parseServiceHost(tc.in)
			if ok != tc.ok || got != tc.want {
				t.Errorf("%s: parseServiceHost(%q) = %v, %v; want %v, %v", tc.reason, tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestRenderResolvesServiceNames checks that the node agent hands a Service name in a
// socket_address to the resolver, takes address and port from it, and rewrites other addresses
// as before (the control case: a loopback address still goes to the pod's localhost).
func TestRenderResolvesServiceNames(t *testing.T) {
	relay := netip.MustParseAddrPort("127.2.0.1:40001")
	var asked []string
	pn := testNet
	pn.resolve = func(host string, port int) (netip.AddrPort, bool) {
		asked = append(asked, host)
		if host == "envoy-gateway.envoy-gateway-system.svc.cluster.local" && port == 18000 {
			return relay, true
		}
		return netip.AddrPort{}, false
	}
	in := `clusters:
- name: xds_cluster
  type: STRICT_DNS
  load_assignment:
    endpoints:
    - lb_endpoints:
      - endpoint: {address: {socket_address: {address: envoy-gateway.envoy-gateway-system.svc.cluster.local, port_value: 18000}}}
      - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 19000}}}
`
	out, _, err := renderConfig([]byte(in), nil, pn)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{`"address": "127.2.0.1"`, `"port_value": 40001`, `"address": "127.1.7.2"`, `"port_value": 19000`} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered config lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "svc.cluster.local") || strings.Contains(got, "18000") {
		t.Errorf("the Service name or its port survived rendering:\n%s", got)
	}
	if len(asked) != 2 {
		t.Errorf("resolver asked about %v, want both socket addresses", asked)
	}
}
