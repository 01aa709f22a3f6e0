package testbed

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var testNet = podNet{podIP: netip.MustParseAddr("127.0.7.2"), localIP: netip.MustParseAddr("127.1.7.2")}

func TestRewriteAddress(t *testing.T) {
	cases := map[string]struct {
		reason, in, want string
	}{
		"Any":       {reason: "0.0.0.0 binds the pod IP", in: "0.0.0.0", want: "127.0.7.2"},
		"AnyV6":     {reason: ":: binds the pod IP", in: "::", want: "127.0.7.2"},
		"PodIP":     {reason: "the pod IP stays", in: "127.0.7.2", want: "127.0.7.2"},
		"Loopback":  {reason: "127.0.0.1 is the pod's private localhost", in: "127.0.0.1", want: "127.1.7.2"},
		"Localhost": {reason: "localhost too", in: "localhost", want: "127.1.7.2"},
		"V6Loop":    {reason: "::1 too", in: "::1", want: "127.1.7.2"},
		"Other":     {reason: "a remote address is left alone", in: "10.96.0.10", want: "10.96.0.10"},
		"OtherPod":  {reason: "another pod's IP stays reachable", in: "127.0.9.3", want: "127.0.9.3"},
		"Relay":     {reason: "a loopback stand-in for a Service stays", in: "127.3.0.1", want: "127.3.0.1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := testNet.rewriteAddress(tc.in); got != tc.want {
				t.Errorf("%s: rewriteAddress(%q) = %q, want %q", tc.reason, tc.in, got, tc.want)
			}
		})
	}
}

func TestMountTableRewrite(t *testing.T) {
	mt := newMountTable([]mount{
		{path: "/etc/envoy", host: "/pod/volumes/config"},
		{path: "/etc/envoy/certs/", host: "/pod/volumes/certs"},
		{path: "/", host: "/pod/volumes/root"},
	})
	cases := map[string]struct {
		reason, in, want string
	}{
		"Nested":   {reason: "the longest mountPath wins", in: "/etc/envoy/certs/tls.crt", want: "/pod/volumes/certs/tls.crt"},
		"Outer":    {reason: "a file of the outer mount", in: "/etc/envoy/envoy.yaml", want: "/pod/volumes/config/envoy.yaml"},
		"Exact":    {reason: "the mount directory itself (watched_directory)", in: "/etc/envoy", want: "/pod/volumes/config"},
		"Sibling":  {reason: "a prefix match must end at a path boundary", in: "/etc/envoyx/a", want: "/etc/envoyx/a"},
		"Unmapped": {reason: "a mount at / is ignored, other paths stay", in: "/dev/stdout", want: "/dev/stdout"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got, _ := mt.rewrite(tc.in); got != tc.want {
				t.Errorf("%s: rewrite(%q) = %q, want %q", tc.reason, tc.in, got, tc.want)
			}
		})
	}
}

func TestRenderConfig(t *testing.T) {
	in := `
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 15000}}
static_resources:
  listeners:
  - address: {socket_address: {address: "::", ipv4_compat: true, port_value: 8443}}
    filter_chains:
    - transport_socket:
        typed_config:
          common_tls_context:
            tls_certificate_sds_secret_configs:
            - name: server
              sds_config:
                path_config_source: {path: /etc/envoy/sds.yaml, watched_directory: {path: /certs}}
  clusters:
  - load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: localhost, port_value: 8080}}}}]}]}
stats_flush_interval: 9223372036s
big: 9007199254740993
`
	mt := newMountTable([]mount{{path: "/etc/envoy", host: "/p/config"}, {path: "/certs", host: "/p/tls"}})
	out, sources, err := renderConfig([]byte(in), mt, testNet)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/p/config/sds.yaml"}, sources); diff != "" {
		t.Errorf("path_config_source paths (-want +got):\n%s", diff)
	}
	s := string(out)
	for _, want := range []string{`"address": "127.1.7.2"`, `"address": "127.0.7.2"`, `"path": "/p/tls"`, `9007199254740993`} {
		if !strings.Contains(s, want) {
			t.Errorf("rendered config lacks %s:\n%s", want, s)
		}
	}
	for _, bad := range []string{"ipv4_compat", "127.0.0.1", "localhost", "/etc/envoy", `"/certs"`} {
		if strings.Contains(s, bad) {
			t.Errorf("rendered config still has %s:\n%s", bad, s)
		}
	}
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Errorf("rendered config is not JSON: %v", err)
	}

	if _, _, err := renderConfig([]byte("admin: [unclosed"), mt, testNet); err == nil {
		t.Error("a broken config was accepted")
	}
}

func TestEnvoyArgs(t *testing.T) {
	mt := newMountTable([]mount{{path: "/etc/envoy", host: "/p/config"}})
	cases := map[string]struct {
		reason        string
		command, args []string
		wantConfig    string
		wantRest      []string
		wantErr       bool
	}{
		"ImageDefault": {reason: "no command or args: the image's -c /etc/envoy/envoy.yaml",
			wantConfig: "/p/config/envoy.yaml"},
		"ArgsOnly": {reason: "owned flags are dropped, others kept and path-mapped",
			args:       []string{"-c", "/etc/envoy/e.yaml", "--concurrency", "4", "--disable-hot-restart", "--log-level=debug", "--base-id=3", "--component-log-level", "upstream:debug", "/etc/envoy/x"},
			wantConfig: "/p/config/e.yaml", wantRest: []string{"--log-level=debug", "--component-log-level", "upstream:debug", "/p/config/x"}},
		"EnvoyCommand":   {reason: "command envoy, args follow", command: []string{"/usr/local/bin/envoy"}, args: []string{"--config-path=/etc/envoy/e.yaml"}, wantConfig: "/p/config/e.yaml"},
		"EntrypointArgs": {reason: "docker-entrypoint.sh envoy ...", args: []string{"envoy", "-c", "/etc/envoy/e.yaml"}, wantConfig: "/p/config/e.yaml"},
		"Shell":          {reason: "a shell command is not Envoy", command: []string{"/bin/sh", "-c", "envoy"}, wantErr: true},
		"NoValue":        {reason: "a flag missing its value", args: []string{"-c"}, wantErr: true},
		"NoConfig":       {reason: "Envoy needs a config", args: []string{"--log-level", "info"}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			argv, err := envoyArgs(tc.command, tc.args)
			var p parsedArgs
			if err == nil {
				p, err = parseEnvoyArgs(argv, mt)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: error %v, wantErr %v", tc.reason, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if p.configPath != tc.wantConfig {
				t.Errorf("%s: config path %q, want %q", tc.reason, p.configPath, tc.wantConfig)
			}
			if diff := cmp.Diff(tc.wantRest, p.rest); diff != "" {
				t.Errorf("%s: remaining args (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestExpandVars(t *testing.T) {
	env := map[string]string{"POD": "p-1", "NS": "ns"}
	cases := map[string]struct{ in, want string }{
		"Defined":   {in: "--service-node=$(POD).$(NS)", want: "--service-node=p-1.ns"},
		"Undefined": {in: "$(MISSING)", want: "$(MISSING)"},
		"Escaped":   {in: "$$(POD)", want: "$(POD)"},
		"Plain":     {in: "$POD", want: "$POD"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := expandVars(tc.in, env); got != tc.want {
				t.Errorf("expandVars(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestIsEnvoyImage(t *testing.T) {
	cases := map[string]bool{
		"envoyproxy/envoy:v1.36.2":        true,
		"docker.io/istio/proxyv2:1.27.0":  true,
		"docker.io/envoyproxy/gateway:v1": false,
		"envoyproxy/ratelimit:master":     false,
		"envoyproxy/envoy-distroless:v1":  true,
		"localhost:5000/envoy":            true,
		"nginx:1.27":                      false,
		"busybox@sha256:envoy":            false,
	}
	for image, want := range cases {
		if got := isEnvoyImage(image); got != want {
			t.Errorf("isEnvoyImage(%q) = %v, want %v", image, got, want)
		}
	}
}

// TestRendersUnchanged: in the mount-namespace mode a path_config_source file is left for Envoy
// to read at its container path unless rendering it changes an address.
func TestRendersUnchanged(t *testing.T) {
	cases := map[string]struct {
		reason, file string
		want         bool
	}{
		"SDSFile": {reason: "an SDS file names only container paths", want: true,
			file: "resources:\n- \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret\n  name: server\n  tls_certificate:\n    certificate_chain: {filename: /certs/tls.crt}\n    private_key: {filename: /certs/tls.key}\n    watched_directory: {path: /certs}\n"},
		"LDSFile": {reason: "a listener on 0.0.0.0 must bind the pod IP", want: false,
			file: "resources:\n- \"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\n  name: l\n  address: {socket_address: {address: 0.0.0.0, port_value: 8443}}\n"},
		"ServiceName": {reason: "a Service's DNS name must reach its relay", want: false,
			file: "resources:\n- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: c\n  load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: cp.ns.svc, port_value: 18000}}}}]}]}\n"},
	}
	net := testNet
	net.resolve = func(host string, port int) (netip.AddrPort, bool) {
		return netip.MustParseAddrPort("127.2.0.1:40000"), host == "cp.ns.svc"
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "source.yaml")
			if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := rendersUnchanged(p, net)
			if err != nil || got != tc.want {
				t.Errorf("%s: rendersUnchanged = %v, %v; want %v", tc.reason, got, err, tc.want)
			}
		})
	}
	if _, err := rendersUnchanged(filepath.Join(t.TempDir(), "missing.yaml"), net); err == nil {
		t.Error("a missing file: no error")
	}
}
