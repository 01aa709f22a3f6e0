package envoytest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ListenerStatPrefix is the prefix of the TLS stats of a listener configured with address and
// port, as Envoy names them: "listener.127.0.0.1_0".
func ListenerStatPrefix(address string, port int) string {
	return fmt.Sprintf("listener.%s_%d", address, port)
}

// Listener is one downstream TLS listener of a test bootstrap. Each answers HTTP requests on
// every path with 200 and the body "certdrift-test <listener>/<chain>".
type Listener struct {
	Name string // default "https"
	// Address is a loopback IP, default 127.0.0.1. Envoy names a listener's TLS stats after the
	// configured address and port ("listener.127.0.0.1_0.ssl.*"), so two ephemeral-port
	// listeners share their TLS stats unless their addresses differ (all of 127/8 is loopback).
	Address string
	// Port is 0 by default: Envoy picks one, read it back with (*Envoy).ListenerAddr.
	Port   int
	Chains []Chain
}

// Chain is one filter chain of a Listener: its SNI match and its TLS context.
type Chain struct {
	Name string
	// ServerNames is the filter chain match on SNI; empty matches every connection.
	ServerNames []string

	// The certificate: either static files, loaded once at start and never reloaded (the
	// DESIGN.md "static tls_certificates" case), or a file-based SDS secret.
	CertFile, KeyFile string
	SDS               *SDSRef

	// Client certificate validation (mTLS): a static trusted CA file or an SDS validation
	// context, and whether a client certificate is required.
	ClientCAFile      string
	ClientCASDS       *SDSRef
	RequireClientCert bool
}

// SDSRef points a TLS context at a secret delivered by file-based SDS.
type SDSRef struct {
	// Name is the secret name, which must match the name inside the SDS resource file.
	Name string
	// Path is the SDS resource file (see TLSSecret, ValidationSecret, WriteSDSFile).
	Path string
	// WatchedDir, when set, becomes sds_config.path_config_source.watched_directory: any file
	// moved into that directory (the kubelet's "..data" rename) makes Envoy re-read Path. Set it
	// to the Secret volume's mount directory. When empty, Envoy watches Path itself for moves.
	WatchedDir string
}

// FileSDSBootstrap is a bootstrap template with one listener "https" whose certificate is the
// SDS secret sds.Name, read from sds.Path. Pass it as Config.Bootstrap.
func FileSDSBootstrap(sds SDSRef) string {
	return Bootstrap(Listener{Chains: []Chain{{SDS: &sds}}})
}

// StaticTLSBootstrap is a bootstrap template with one listener "https" whose certificate is
// read once from certFile/keyFile (static tls_certificates: Envoy never reloads it). This is the
// shape of the seed blog-post config, in the v3 API. Pass it as Config.Bootstrap.
func StaticTLSBootstrap(certFile, keyFile string) string {
	return Bootstrap(Listener{Chains: []Chain{{CertFile: certFile, KeyFile: keyFile}}})
}

// Bootstrap is a bootstrap template for the given listeners, with the admin endpoint on an
// ephemeral loopback port. Pass it as Config.Bootstrap. It is JSON, which is YAML.
func Bootstrap(ls ...Listener) string {
	var listeners []any
	for _, l := range ls {
		listeners = append(listeners, listenerJSON(l))
	}
	doc := obj{
		"node": obj{"id": "certdrift-test", "cluster": "certdrift-test"},
		// The harness requires port 0 and learns the bound port from --admin-address-path.
		"admin":            obj{"address": obj{"socket_address": obj{"address": "127.0.0.1", "port_value": 0}}},
		"static_resources": obj{"listeners": listeners},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("envoytest: marshal bootstrap: %v", err)) // only maps, strings, ints
	}
	// The result is executed as a text/template: keep any "{{" in paths literal.
	return strings.ReplaceAll(string(b), "{{", `{{"{{"}}`)
}

type obj = map[string]any

func listenerJSON(l Listener) obj {
	if l.Name == "" {
		l.Name = "https"
	}
	if l.Address == "" {
		l.Address = "127.0.0.1"
	}
	var chains []any
	for i, c := range l.Chains {
		if c.Name == "" {
			c.Name = fmt.Sprintf("chain%d", i)
		}
		chains = append(chains, chainJSON(l.Name, c))
	}
	return obj{
		"name":    l.Name,
		"address": obj{"socket_address": obj{"address": l.Address, "port_value": l.Port}},
		"listener_filters": []any{obj{
			"name":         "envoy.filters.listener.tls_inspector",
			"typed_config": obj{"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"},
		}},
		"filter_chains": chains,
	}
}

func chainJSON(listener string, c Chain) obj {
	common := obj{"alpn_protocols": []string{"h2", "http/1.1"}}
	switch {
	case c.SDS != nil:
		common["tls_certificate_sds_secret_configs"] = []any{sdsConfigJSON(*c.SDS)}
	case c.CertFile != "":
		common["tls_certificates"] = []any{obj{
			"certificate_chain": obj{"filename": c.CertFile},
			"private_key":       obj{"filename": c.KeyFile},
		}}
	}
	switch {
	case c.ClientCASDS != nil:
		common["validation_context_sds_secret_config"] = sdsConfigJSON(*c.ClientCASDS)
	case c.ClientCAFile != "":
		common["validation_context"] = obj{"trusted_ca": obj{"filename": c.ClientCAFile}}
	}
	tlsCtx := obj{
		"@type":              "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
		"common_tls_context": common,
	}
	if c.RequireClientCert {
		tlsCtx["require_client_certificate"] = true
	}
	chain := obj{
		"name": c.Name,
		"transport_socket": obj{
			"name":         "envoy.transport_sockets.tls",
			"typed_config": tlsCtx,
		},
		"filters": []any{hcmJSON(listener + "/" + c.Name)},
	}
	if len(c.ServerNames) > 0 {
		chain["filter_chain_match"] = obj{"server_names": c.ServerNames}
	}
	return chain
}

func sdsConfigJSON(s SDSRef) obj {
	src := obj{"path": s.Path}
	if s.WatchedDir != "" {
		src["watched_directory"] = obj{"path": s.WatchedDir}
	}
	return obj{
		"name": s.Name,
		"sds_config": obj{
			"path_config_source":   src,
			"resource_api_version": "V3",
		},
	}
}

// hcmJSON is an HTTP connection manager answering every request with 200 and body.
func hcmJSON(body string) obj {
	return obj{
		"name": "envoy.filters.network.http_connection_manager",
		"typed_config": obj{
			"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
			"stat_prefix": "https",
			"route_config": obj{
				"virtual_hosts": []any{obj{
					"name":    "all",
					"domains": []string{"*"},
					"routes": []any{obj{
						"match":           obj{"prefix": "/"},
						"direct_response": obj{"status": 200, "body": obj{"inline_string": "certdrift-test " + body}},
					}},
				}},
			},
			"http_filters": []any{obj{
				"name":         "envoy.filters.http.router",
				"typed_config": obj{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
			}},
		},
	}
}

// TLSSecret is the content of an SDS resource file holding one TLS certificate secret that
// reads certFile and keyFile (paths through the kubelet's per-key symlinks, e.g.
// "/certs/tls.crt"). watchedDir, when set, becomes tls_certificate.watched_directory: Envoy then
// reloads the pair when a file is moved into that directory instead of watching each file's
// parent directory.
func TLSSecret(name, certFile, keyFile, watchedDir string) []byte {
	tc := obj{
		"certificate_chain": obj{"filename": certFile},
		"private_key":       obj{"filename": keyFile},
	}
	if watchedDir != "" {
		tc["watched_directory"] = obj{"path": watchedDir}
	}
	return sdsResource(obj{
		"@type":           "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
		"name":            name,
		"tls_certificate": tc,
	})
}

// ValidationSecret is the content of an SDS resource file holding one validation context that
// trusts the CA bundle in caFile. watchedDir is as for TLSSecret.
func ValidationSecret(name, caFile, watchedDir string) []byte {
	vc := obj{"trusted_ca": obj{"filename": caFile}}
	if watchedDir != "" {
		vc["watched_directory"] = obj{"path": watchedDir}
	}
	return sdsResource(obj{
		"@type":              "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
		"name":               name,
		"validation_context": vc,
	})
}

func sdsResource(secret obj) []byte {
	b, err := json.MarshalIndent(obj{"resources": []any{secret}}, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("envoytest: marshal SDS resource: %v", err))
	}
	return append(b, '\n')
}

// WriteSDSFile replaces path with data through a rename in the same directory: Envoy's
// path_config_source watch fires on a file moved into place, not on an in-place write.
func WriteSDSFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sds-*.tmp")
	if err != nil {
		return fmt.Errorf("write SDS file %s: %w", path, err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write SDS file %s: %v %v", path, werr, cerr)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write SDS file %s: %w", path, err)
	}
	return nil
}
