package envoyadmin

import (
	"bufio"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// secretSummary is what the tests compare of a Secret: identities instead of parsed certificates.
type secretSummary struct {
	Name, State, Version string
	LastUpdated          time.Time
	ChainSerials         []string
	CASerials            []string
	SPIFFE               map[string][]string
	CertFile, KeyFile    string
	WatchedDir, CAFile   string
	KeyRedacted          bool
	HasCert, HasVal      bool
	Errs                 string
}

func serials(cs []*x509.Certificate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, pki.SerialHex(c.SerialNumber))
	}
	return out
}

func summarize(ss []envoystate.Secret) []secretSummary {
	var out []secretSummary
	for _, s := range ss {
		sum := secretSummary{
			Name: s.Name, State: string(s.State), Version: s.VersionInfo, LastUpdated: s.LastUpdated,
			ChainSerials: serials(s.Chain), CASerials: serials(s.ValidationCA),
			CertFile: s.CertFile, KeyFile: s.KeyFile, WatchedDir: s.WatchedDir, CAFile: s.CAFile,
			KeyRedacted: s.KeyRedacted, HasCert: s.HasCertificate, HasVal: s.HasValidation,
		}
		if s.SPIFFEBundles != nil {
			sum.SPIFFE = map[string][]string{}
			for td, cs := range s.SPIFFEBundles {
				sum.SPIFFE[td] = serials(cs)
			}
		}
		if s.ChainErr != nil || s.ValidationCAErr != nil {
			sum.Errs = fmt.Sprint(s.ChainErr, s.ValidationCAErr)
		}
		out = append(out, sum)
	}
	return out
}

// problems lists every problem a parse reported: the skipped parts and the errors on secrets and
// filter chains, one line each.
func problems(secrets []envoystate.Secret, listeners []envoystate.FilterChainTLS, skipped []envoystate.ConfigSkip) []string {
	var out []string
	for _, s := range skipped {
		out = append(out, "skipped "+s.String())
	}
	for _, s := range secrets {
		for _, err := range []error{s.Err, s.ChainErr, s.ValidationCAErr} {
			if err != nil {
				out = append(out, fmt.Sprintf("secret %q: %v", s.Name, err))
			}
		}
	}
	for _, l := range listeners {
		for _, err := range []error{l.InlineCertsErr, l.InlineCAErr} {
			if err != nil {
				out = append(out, fmt.Sprintf("listener %q chain %q: %v", l.Listener, l.FilterChain, err))
			}
		}
	}
	return out
}

func TestParseConfigDumpIstio(t *testing.T) {
	secrets, listeners, skipped, err := ParseConfigDumpDetail(readTestdata(t, "fixtures/config_dump_secrets_istio_istioctl_testdata.json"))
	if err != nil {
		t.Fatalf("ParseConfigDump: %v", err)
	}
	want := []secretSummary{
		{
			Name: "default", State: "active", LastUpdated: time.Date(2023, 5, 15, 1, 32, 52, 262e6, time.UTC),
			ChainSerials: []string{"6fbee254c22900615cb1f74e3d2f1713", "193a543fe2b0d9cd4847675394dfc54"},
			KeyRedacted:  true, HasCert: true,
		},
		{
			Name: "ROOTCA", State: "active", LastUpdated: time.Date(2023, 5, 6, 5, 41, 32, 118e6, time.UTC),
			CASerials: []string{"193a543fe2b0d9cd4847675394dfc54"}, HasVal: true,
		},
		{
			// A warming secret that never arrived: kept, with no payload, so that a stuck
			// warming secret can be reported.
			Name: "configmap://some/thing", State: "warming", Version: "uninitialized",
			LastUpdated: time.Date(2025, 4, 11, 14, 59, 35, 648e6, time.UTC),
		},
	}
	if diff := cmp.Diff(want, summarize(secrets)); diff != "" {
		t.Errorf("secrets (-want +got):\n%s", diff)
	}
	if len(listeners) != 0 || len(skipped) != 0 {
		t.Errorf("listeners %v, skipped %v: want none from a secrets-only dump", listeners, skipped)
	}
}

func TestParseConfigDumpSPIRE(t *testing.T) {
	secrets, _, skipped, err := ParseConfigDumpDetail(readTestdata(t, "fixtures/config_dump_secrets_spire_istioctl_testdata.json"))
	if err != nil {
		t.Fatalf("ParseConfigDump: %v", err)
	}
	want := []secretSummary{
		{
			Name: "default", State: "active", LastUpdated: time.Date(2024, 10, 25, 13, 26, 36, 591e6, time.UTC),
			ChainSerials: []string{"cd4902e499169b11ec171dad1668adbb", "fb3ce62e670f537c7c02052b68786661"},
			KeyRedacted:  true, HasCert: true,
		},
		{
			// SPIFFE validator: an empty trusted_ca, and one bundle per trust domain.
			Name: "ROOTCA", State: "active", LastUpdated: time.Date(2024, 10, 25, 13, 26, 36, 586e6, time.UTC),
			HasVal: true,
			SPIFFE: map[string][]string{
				"east.local": {"529cbbaf623611d057b517d4ffe341e4e8035037"},
				"west.local": {"6726e5fad145f8ca9a711f0550297ced839ee37f"},
			},
		},
	}
	if diff := cmp.Diff(want, summarize(secrets)); diff != "" {
		t.Errorf("secrets (-want +got):\n%s", diff)
	}
	if len(skipped) != 0 {
		t.Errorf("skipped %v", skipped)
	}
}

// TestConfigDumpMatchesIstioctl checks the parsed dumps against what istioctl printed for the same
// dumps: every row's serial and validity must be found in the secret of that name.
func TestConfigDumpMatchesIstioctl(t *testing.T) {
	for _, setup := range []string{"istio", "spire"} {
		t.Run(setup, func(t *testing.T) {
			secrets, _, err := ParseConfigDump(readTestdata(t, "fixtures/config_dump_secrets_"+setup+"_istioctl_testdata.json"))
			if err != nil {
				t.Fatalf("ParseConfigDump: %v", err)
			}
			byName := map[string]envoystate.Secret{}
			for _, s := range secrets {
				byName[s.Name] = s
			}
			sc := bufio.NewScanner(strings.NewReader(string(readTestdata(t, "fixtures/istioctl_pc_secret_output_"+setup+"_testdata.txt"))))
			sc.Scan() // header
			rows := 0
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) == 0 {
					continue
				}
				rows++
				s, ok := byName[f[0]]
				if !ok {
					t.Errorf("istioctl row %q: no secret of that name", f[0])
					continue
				}
				if strings.Contains(sc.Text(), "WARMING") {
					if s.State != envoystate.SecretWarming {
						t.Errorf("%s: state %q, istioctl says WARMING", s.Name, s.State)
					}
					continue
				}
				// RESOURCE TYPE... STATUS VALID SERIAL NOTAFTER NOTBEFORE [TRUST DOMAIN]
				end := len(f)
				if setup == "spire" {
					end-- // TRUST DOMAIN column
				}
				serial, notAfter, notBefore := f[end-3], ts(f[end-2]), ts(f[end-1])
				var certs []*x509.Certificate
				certs = append(certs, s.Chain...)
				certs = append(certs, s.ValidationCA...)
				for _, b := range s.SPIFFEBundles {
					certs = append(certs, b...)
				}
				found := false
				for _, c := range certs {
					n, err := pki.ParseSerial(serial)
					if err == nil && pki.SerialsEqual(n, c.SerialNumber) && c.NotAfter.Equal(notAfter) && c.NotBefore.Equal(notBefore) {
						found = true
					}
				}
				if !found {
					t.Errorf("%s: no certificate with serial %s valid %s..%s (have %v)", s.Name, serial, notBefore, notAfter, serials(certs))
				}
			}
			if rows < 3 {
				t.Fatalf("read %d istioctl rows, want at least 3", rows)
			}
		})
	}
}

func TestParseConfigDumpReal(t *testing.T) {
	for _, v := range realVersions {
		for _, file := range []string{"config_dump.json", "config_dump_mask_secrets.json", "config_dump_mask_listeners.json"} {
			t.Run(v+"/"+file, func(t *testing.T) {
				secrets, listeners, skipped, err := ParseConfigDumpDetail(readTestdata(t, "real-"+v+"/"+file))
				if err != nil {
					t.Fatalf("ParseConfigDump: %v", err)
				}
				if len(skipped) != 0 {
					t.Errorf("skipped %v", skipped)
				}
				dir := recordDir(t, v)
				wantSecrets := []secretSummary{
					{Name: "static-inline-secret", State: "static", ChainSerials: []string{"7f"}, KeyRedacted: true, HasCert: true},
					{
						// File-based SDS: Envoy inlines the files it read and redacts the key,
						// keeping only the watched directory.
						Name: "kubernetes://default/sds-cert", State: "active", ChainSerials: []string{"a0b0c", "abcdef01"},
						WatchedDir: dir + "/sds/certs", KeyRedacted: true, HasCert: true,
					},
					{Name: "kubernetes://default/sds-ca", State: "active", CASerials: []string{"abcdef01"}, HasVal: true},
				}
				wantListeners := []envoystate.FilterChainTLS{
					{
						Listener: "static_tls", State: "static", Address: "127.0.0.1:29902", FilterChain: "static-files",
						ServerNames: []string{"static.example.com"}, CertFiles: []string{dir + "/static/tls.crt"},
						CAFile: dir + "/ca/ca.crt", RequireClientCert: true,
					},
					{
						Listener: "static_tls", State: "static", Address: "127.0.0.1:29902", FilterChain: "sds-files",
						ServerNames:  []string{"sds.example.com", "*.sds.example.com"},
						SDSCertNames: []string{"kubernetes://default/sds-cert"}, SDSValidationName: "kubernetes://default/sds-ca",
						SDSCertSources: []envoystate.SDSSource{{
							Name: "kubernetes://default/sds-cert", Path: dir + "/sds/cert.yaml", WatchedDir: dir + "/sds",
						}},
						SDSValidationSource: &envoystate.SDSSource{
							Name: "kubernetes://default/sds-ca", Path: dir + "/sds/ca.yaml", WatchedDir: dir + "/sds",
						},
					},
					{
						Listener: "static_tls", State: "static", Address: "127.0.0.1:29902", FilterChain: "static-secret",
						ServerNames: []string{"inline.example.com"}, SDSCertNames: []string{"static-inline-secret"},
					},
				}
				if file == "config_dump_mask_listeners.json" {
					wantSecrets = nil
				}
				if file == "config_dump_mask_secrets.json" {
					wantListeners = nil
				}
				got := summarize(secrets)
				for i := range got {
					got[i].LastUpdated = time.Time{}
				}
				if diff := cmp.Diff(wantSecrets, got); diff != "" {
					t.Errorf("secrets (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(wantListeners, listeners); diff != "" {
					t.Errorf("listeners (-want +got):\n%s", diff)
				}
				for _, s := range secrets {
					if s.State == envoystate.SecretActive && s.LastUpdated.IsZero() {
						t.Errorf("%s: no last_updated", s.Name)
					}
				}
			})
		}
	}
}

// recordDir is the temporary directory record.sh used, read back from the recording.
func recordDir(t *testing.T, v string) string {
	var si struct {
		Opts struct {
			ConfigPath string `json:"config_path"`
		} `json:"command_line_options"`
	}
	if err := json.Unmarshal(readTestdata(t, "real-"+v+"/server_info.json"), &si); err != nil {
		t.Fatalf("server_info.json: %v", err)
	}
	return strings.TrimSuffix(si.Opts.ConfigPath, "/envoy.yaml")
}

func TestParseConfigDumpResourceForm(t *testing.T) {
	// ?resource=dynamic_active_secrets returns bare DynamicSecret entries.
	secrets, _, err := ParseConfigDump(readTestdata(t, "real-1.40.0/config_dump_resource_dynamic_active_secrets.json"))
	if err != nil {
		t.Fatalf("ParseConfigDump: %v", err)
	}
	var names []string
	for _, s := range secrets {
		names = append(names, s.Name+"/"+string(s.State))
	}
	want := []string{"kubernetes://default/sds-cert/active", "kubernetes://default/sds-ca/active"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("secrets (-want +got):\n%s", diff)
	}
}

// yamlToJSON converts YAML (as control planes print xDS) to JSON for protojson.
func yamlToJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("yaml to json: %v", err)
	}
	return j
}

func TestEnvoyGatewayListenersSNIToSDS(t *testing.T) {
	var listeners []json.RawMessage
	if err := json.Unmarshal(yamlToJSON(t, readTestdata(t, "fixtures/envoygateway_xds_listeners_sni_to_sds_testdata.yaml")), &listeners); err != nil {
		t.Fatalf("listeners: %v", err)
	}
	got := map[string][]string{} // SNI -> SDS secret names
	addrs := map[string]bool{}
	for _, l := range listeners {
		fcs, err := ParseListenerJSON(l)
		if err != nil {
			t.Fatalf("ParseListenerJSON: %v", err)
		}
		for _, fc := range fcs {
			addrs[fc.Address] = true
			for _, sni := range fc.ServerNames {
				got[sni] = append(got[sni], fc.SDSCertNames...)
			}
		}
	}
	want := map[string][]string{
		"foo.example.com": {"envoy-gateway/tls-secret-foo-example-com"},
		"*.example.com":   {"envoy-gateway/tls-secret-example-com"},
		"bar.example.com": {"envoy-gateway/tls-secret-bar-example-com"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SNI -> secret (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"0.0.0.0:10443": true, "0.0.0.0:8443": true}, addrs); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
}

func TestEnvoyGatewaySecrets(t *testing.T) {
	// xDS Secrets (not a config dump): wrap each as a static secret entry of a SecretsConfigDump,
	// which is how Envoy would print them once received.
	var secrets []map[string]any
	if err := json.Unmarshal(yamlToJSON(t, readTestdata(t, "fixtures/envoygateway_xds_secrets_testdata.yaml")), &secrets); err != nil {
		t.Fatalf("secrets: %v", err)
	}
	var entries []any
	for _, s := range secrets {
		s["@type"] = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
		entries = append(entries, map[string]any{"name": s["name"], "secret": s})
	}
	dump, _ := json.Marshal(map[string]any{"configs": []any{map[string]any{
		"@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump", "static_secrets": entries,
	}}})
	got, _, err := ParseConfigDump(dump)
	if err != nil {
		t.Fatalf("ParseConfigDump: %v", err)
	}
	var names []string
	for _, s := range got {
		if len(s.Chain) != 1 || s.ChainErr != nil || !s.KeyRedacted {
			t.Errorf("%s: %d certs, err %v, key redacted %v; want one cert and a redacted key", s.Name, len(s.Chain), s.ChainErr, s.KeyRedacted)
		} else if s.Chain[0].Subject.CommonName == "" {
			t.Errorf("%s: leaf has no common name", s.Name)
		}
		names = append(names, s.Name)
	}
	sort.Strings(names)
	want := []string{"envoy-gateway/tls-secret-bar-example-com", "envoy-gateway/tls-secret-example-com", "envoy-gateway/tls-secret-foo-example-com"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("secret names (-want +got):\n%s", diff)
	}
}

func TestEnvoyGatewayDeploymentBootstrap(t *testing.T) {
	// The proxy Deployment carries Envoy's bootstrap inline (--config-yaml). Its admin listens on
	// loopback only, so certdrift must reach it through port-forward or a sidecar; only the
	// stats port is exposed, and it serves /stats/prometheus (see TestParseStatsPrometheusRefused).
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name string   `yaml:"name"`
						Args []string `yaml:"args"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(readTestdata(t, "fixtures/envoygateway_proxy_deployment_default_testdata.yaml"), &dep); err != nil {
		t.Fatalf("deployment: %v", err)
	}
	var bootstrap string
	for _, c := range dep.Spec.Template.Spec.Containers {
		for i, a := range c.Args {
			if a == "--config-yaml" && i+1 < len(c.Args) {
				bootstrap = c.Args[i+1]
			}
		}
	}
	if bootstrap == "" {
		t.Fatal("no --config-yaml in the deployment")
	}
	addr, err := AdminAddressFromBootstrap(yamlToJSON(t, []byte(bootstrap)))
	if err != nil {
		t.Fatalf("AdminAddressFromBootstrap: %v", err)
	}
	if addr != "127.0.0.1:19000" {
		t.Errorf("admin address %q, want 127.0.0.1:19000", addr)
	}
}

func TestParseConfigDumpHostile(t *testing.T) {
	cases := map[string]struct {
		body        string
		wantErr     string
		wantSkipped string
		wantSecrets int
	}{
		"Empty":      {body: " ", wantErr: "empty body"},
		"HTML":       {body: "<!DOCTYPE html>", wantErr: "expected a JSON object"},
		"WrongShape": {body: `{"certificates": []}`, wantErr: `no "configs" field`},
		"NotArray":   {body: `{"configs": 3}`, wantErr: "unexpected JSON shape"},
		"Truncated":  {body: `{"configs": [{"@type": "x"`, wantErr: "invalid JSON"},
		"EmptyObj":   {body: `{}`},
		"UnknownDump": {
			body:        `{"configs": [{"@type": "type.googleapis.com/vendor.admin.PrivateConfigDump", "x": 1}]}`,
			wantSkipped: "vendor.admin.PrivateConfigDump",
		},
		"NoType": {body: `{"configs": [7]}`, wantSkipped: "not an object with @type"},
		"UnknownSecretType": {
			body: `{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump",
				"dynamic_active_secrets": [{"name": "a", "secret": {"@type": "type.googleapis.com/vendor.Secret", "k": 1}},
				{"name": "b", "secret": {"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
				 "name": "b", "generic_secret": {"secret": {"inline_string": "s3cr3t"}}}}]}]}`,
			wantSkipped: "vendor.Secret", wantSecrets: 2,
		},
		"BadSecretEntrySkippedOthersKept": {
			body: `{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump",
				"dynamic_active_secrets": [{"name": 5}, {"name": "ok"}]}]}`,
			wantSkipped: "dynamic_active_secrets[0]", wantSecrets: 1,
		},
		"BadPEM": {
			body: `{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump.DynamicSecret", "name": "x",
				"secret": {"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
				"tls_certificate": {"certificate_chain": {"inline_string": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}}}}]}`,
			wantSecrets: 1,
		},
		"ListenerWithUnknownTransportSocket": {
			body: `{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump", "static_listeners": [{"listener": {
				"@type": "type.googleapis.com/envoy.config.listener.v3.Listener", "name": "l",
				"filter_chains": [{"name": "odd", "transport_socket": {"name": "x", "typed_config": {"@type": "type.googleapis.com/vendor.Socket"}}},
				{"name": "plain", "transport_socket": {"name": "envoy.transport_sockets.raw_buffer", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"}}}]}}]}]}`,
			wantSkipped: "filter_chains[0] (odd)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			secrets, listeners, skipped, err := ParseConfigDumpDetail([]byte(tc.body))
			if tc.wantErr == "" && err != nil {
				t.Fatalf("ParseConfigDump: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			got := problems(secrets, listeners, skipped)
			if tc.wantSkipped != "" && !strings.Contains(strings.Join(got, "\n"), tc.wantSkipped) {
				t.Errorf("problems = %q, want one mentioning %q", got, tc.wantSkipped)
			}
			if tc.wantSkipped == "" && len(got) > 0 && name != "BadPEM" {
				t.Errorf("problems = %q, want none", got)
			}
			if len(secrets) != tc.wantSecrets {
				t.Errorf("got %d secrets, want %d", len(secrets), tc.wantSecrets)
			}
			if strings.Contains(fmt.Sprint(secrets, skipped, err), "s3cr3t") {
				t.Error("generic secret content leaked into the result")
			}
		})
	}
	secrets, _, _ := ParseConfigDump([]byte(cases["BadPEM"].body))
	if secrets[0].ChainErr == nil {
		t.Error("bad inline PEM: ChainErr is nil")
	}
}

func TestParseConfigDumpLegacyV2(t *testing.T) {
	// Envoy before 1.14 printed v2 types and a FilterChain.tls_context that v3 dropped.
	body := `{"configs": [
	  {"@type": "type.googleapis.com/envoy.admin.v2alpha.ListenersConfigDump",
	   "dynamic_listeners": [{"name": "l", "active_state": {"version_info": "1", "listener": {
	     "@type": "type.googleapis.com/envoy.api.v2.Listener", "name": "https",
	     "address": {"socket_address": {"address": "0.0.0.0", "port_value": 443}},
	     "filter_chains": [{"filter_chain_match": {"server_names": ["old.example.com"]},
	       "tls_context": {"common_tls_context": {"tls_certificate_sds_secret_configs": [{"name": "kubernetes://old"}]},
	                       "require_client_certificate": true}}]}}}]},
	  {"@type": "type.googleapis.com/envoy.admin.v2alpha.SecretsConfigDump",
	   "dynamic_active_secrets": [{"name": "kubernetes://old", "version_info": "v1", "secret": {
	     "@type": "type.googleapis.com/envoy.api.v2.auth.Secret", "name": "kubernetes://old",
	     "tls_certificate": {"certificate_chain": {"filename": "/etc/certs/cert-chain.pem"}, "private_key": {"filename": "/etc/certs/key.pem"}}}}]},
	  {"@type": "type.googleapis.com/envoy.admin.v2alpha.BootstrapConfigDump", "bootstrap": {}}]}`
	secrets, listeners, skipped, err := ParseConfigDumpDetail([]byte(body))
	if err != nil || len(skipped) > 0 {
		t.Fatalf("ParseConfigDump: err %v, skipped %v", err, skipped)
	}
	wantL := []envoystate.FilterChainTLS{{
		Listener: "https", State: "active", Address: "0.0.0.0:443", ServerNames: []string{"old.example.com"},
		SDSCertNames: []string{"kubernetes://old"}, RequireClientCert: true,
	}}
	if diff := cmp.Diff(wantL, listeners); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
	wantS := []secretSummary{{
		Name: "kubernetes://old", State: "active", Version: "v1", HasCert: true,
		CertFile: "/etc/certs/cert-chain.pem", KeyFile: "/etc/certs/key.pem",
	}}
	if diff := cmp.Diff(wantS, summarize(secrets)); diff != "" {
		t.Errorf("secrets (-want +got):\n%s", diff)
	}
}

func TestListenerSDSSources(t *testing.T) {
	// sds_config forms Envoy accepts: path_config_source with and without a watched directory, the
	// deprecated path string, ADS (not file-based: no source) and no sds_config (static secret).
	const tmpl = `{"name": "l", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 8443}},
	  "filter_chains": [{"transport_socket": {"name": "tls", "typed_config": {
	    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
	    "common_tls_context": {"tls_certificate_sds_secret_configs": [%s]%s}}}}]}`
	cases := map[string]struct {
		certs, validation string
		wantSources       []envoystate.SDSSource
		wantValidation    *envoystate.SDSSource
	}{
		"PathConfigSourceWatched": {
			certs:       `{"name": "server_cert", "sds_config": {"resource_api_version": "V3", "path_config_source": {"path": "/etc/envoy/sds.yaml", "watched_directory": {"path": "/certs"}}}}`,
			wantSources: []envoystate.SDSSource{{Name: "server_cert", Path: "/etc/envoy/sds.yaml", WatchedDir: "/certs"}},
		},
		"PathConfigSourceUnwatched": {
			certs:       `{"name": "a", "sds_config": {"path_config_source": {"path": "/sds/a.yaml"}}}`,
			wantSources: []envoystate.SDSSource{{Name: "a", Path: "/sds/a.yaml"}},
		},
		"DeprecatedPath": {
			certs:       `{"name": "old", "sds_config": {"path": "/etc/sds/old.json"}}`,
			wantSources: []envoystate.SDSSource{{Name: "old", Path: "/etc/sds/old.json"}},
		},
		"ADSAndStaticHaveNoSource": {
			certs:       `{"name": "ads", "sds_config": {"ads": {}}}, {"name": "static"}, {"name": "file", "sds_config": {"path_config_source": {"path": "/f.yaml"}}}`,
			wantSources: []envoystate.SDSSource{{Name: "file", Path: "/f.yaml"}},
		},
		"ValidationContextSDS": {
			certs:          `{"name": "c"}`,
			validation:     `, "validation_context_sds_secret_config": {"name": "ca", "sds_config": {"path_config_source": {"path": "/sds/ca.yaml", "watched_directory": {"path": "/ca"}}}}`,
			wantValidation: &envoystate.SDSSource{Name: "ca", Path: "/sds/ca.yaml", WatchedDir: "/ca"},
		},
		"CombinedValidationContextSDS": {
			certs:          `{"name": "c"}`,
			validation:     `, "combined_validation_context": {"default_validation_context": {}, "validation_context_sds_secret_config": {"name": "ca2", "sds_config": {"path": "/sds/ca2.yaml"}}}`,
			wantValidation: &envoystate.SDSSource{Name: "ca2", Path: "/sds/ca2.yaml"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fcs, err := ParseListenerJSON([]byte(fmt.Sprintf(tmpl, tc.certs, tc.validation)))
			if err != nil {
				t.Fatalf("ParseListenerJSON: %v", err)
			}
			if len(fcs) != 1 {
				t.Fatalf("got %d TLS filter chains, want 1", len(fcs))
			}
			if diff := cmp.Diff(tc.wantSources, fcs[0].SDSCertSources); diff != "" {
				t.Errorf("SDSCertSources (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantValidation, fcs[0].SDSValidationSource); diff != "" {
				t.Errorf("SDSValidationSource (-want +got):\n%s", diff)
			}
		})
	}
}
