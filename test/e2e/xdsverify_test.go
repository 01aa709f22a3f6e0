package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

// xdsBootstrap is an Envoy whose ADS stream goes over TLS to {{.Data.Relay}}, verified against
// {{.Data.CA}}. initial_fetch_timeout lets it become ready without a control plane.
const xdsBootstrap = `
admin: {address: {socket_address: {{.AdminSocket}}}}
node: {id: xds-verify, cluster: xds-verify}
dynamic_resources:
  ads_config: {api_type: GRPC, transport_api_version: V3, grpc_services: [{envoy_grpc: {cluster_name: xds_cluster}}]}
  cds_config: {ads: {}, resource_api_version: V3, initial_fetch_timeout: 1s}
  lds_config: {ads: {}, resource_api_version: V3, initial_fetch_timeout: 1s}
static_resources:
  clusters:
  - name: xds_cluster
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: xds_cluster
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: {{.Data.Port}}}}}}]}]
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: control-plane
        common_tls_context:
          validation_context: {trusted_ca: {filename: {{yamlstr .Data.CA}}}}
`

// TestXDSVerifyFailureWhileRetrying is the single-sample trap of Envoy's xDS stats on a real
// Envoy: control_plane.connected_state reads 1 while a connection attempt is pending, although
// the stream has never been up. A proxy whose trust does not hold the control plane's CA (a
// certgen CA rotation's window) tries, is refused (ssl.fail_verify_error), and retries; a sample
// taken during a retry reads connected_state 1. certdrift must report the gap from that sample
// too: the xDS cluster has never completed a handshake (ssl.handshake 0). One CI run of
// test/scenarios/eg-ca-rotation on Envoy 1.36.2 missed the gap this way.
//
// The "control plane" is a plain crypto/tls server with a leaf from a CA the Envoy does not
// trust, behind a relay that passes the first connection through (the refusal) and then holds
// every later one open without answering, so the retry stays pending for as long as the test
// needs it: a slow control plane under load, made deterministic.
func TestXDSVerifyFailureWhileRetrying(t *testing.T) {
	trusted := certs.NewCA(t, certs.WithCommonName("xds-trusted-ca"))
	other := certs.NewCA(t, certs.WithCommonName("xds-other-ca"))
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, certs.Bundle(trusted), 0o644); err != nil {
		t.Fatal(err)
	}
	leaf := other.Leaf(t, certs.WithCommonName("control-plane"), certs.WithDNSNames("control-plane"))
	server, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate()}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	go func() {
		for {
			c, err := server.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _ = c.(*tls.Conn).Handshake(); _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	relay := newHoldingRelay(t, server.Addr().String())

	e := envoytest.Start(t, envoytest.Config{Bootstrap: xdsBootstrap, Data: map[string]any{"Port": relay.port(), "CA": caFile}})
	var held map[string]uint64
	waitFor(t, "a refused xDS handshake, then a retry pending (connected_state 1)", 60*time.Second, func() (bool, string) {
		held = e.Counters(t)
		s := fmt.Sprintf("connected_state=%d fail_verify_error=%d ssl.handshake=%d relay held %d",
			held["control_plane.connected_state"], held["cluster.xds_cluster.ssl.fail_verify_error"],
			held["cluster.xds_cluster.ssl.handshake"], relay.heldCount())
		return held["cluster.xds_cluster.ssl.fail_verify_error"] >= 1 && held["control_plane.connected_state"] == 1 && relay.heldCount() >= 1, s
	})
	t.Logf("OBSERVED Envoy %s during a pending retry: connected_state %d, xds_cluster fail_verify_error %d, ssl.handshake %d",
		e.Version(), held["control_plane.connected_state"], held["cluster.xds_cluster.ssl.fail_verify_error"], held["cluster.xds_cluster.ssl.handshake"])

	cfg := writeConfig(t, fmt.Sprintf("envoys:\n  - name: proxy\n    admin: %s\n", e.AdminURL))
	code, r := auditJSON(t, cfg)
	var gaps []audit.Finding
	for _, f := range r.Findings {
		if f.Code == audit.CABundleGap {
			gaps = append(gaps, f)
		}
	}
	if len(gaps) != 1 {
		t.Fatalf("audit during a pending retry: exit %d, %d CA_BUNDLE_GAP findings, want 1 on xds_cluster:%s", code, len(gaps), describe(r))
	}
	g := gaps[0]
	t.Logf("OBSERVED %s %s: %s %v", g.Code, g.Severity, g.Message, g.Evidence)
	if g.Severity != audit.Critical || g.Evidence["cluster"] != "xds_cluster" || g.Evidence["ssl_handshake"] != "0" || g.Evidence["fail_verify_error"] == "0" {
		t.Errorf("CA_BUNDLE_GAP %s, evidence %v: want critical on xds_cluster with ssl_handshake 0 and fail_verify_error > 0", g.Severity, g.Evidence)
	}
	// The sample certdrift judged is the trap itself only if the gauge still read 1 then; the
	// relay keeps the retry pending, so it must have.
	if g.Evidence["control_plane_connected_state"] != "1" {
		t.Errorf("certdrift read control_plane_connected_state %q, want 1 (the pending retry): the test did not produce the case it is about", g.Evidence["control_plane_connected_state"])
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
}

// holdingRelay forwards its first connection to target and holds every later one open without
// reading or answering until the test ends.
type holdingRelay struct {
	ln   net.Listener
	mu   sync.Mutex
	held []net.Conn
	n    int
}

func newHoldingRelay(t *testing.T, target string) *holdingRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &holdingRelay{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.n++
			first := r.n == 1
			if !first {
				r.held = append(r.held, c)
			}
			r.mu.Unlock()
			if first {
				go pipe(c, target)
			}
		}
	}()
	return r
}

func (r *holdingRelay) port() int { return r.ln.Addr().(*net.TCPAddr).Port }

func (r *holdingRelay) heldCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// pipe relays c to target both ways until either side closes.
func pipe(c net.Conn, target string) {
	defer c.Close()
	u, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer u.Close()
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
}
