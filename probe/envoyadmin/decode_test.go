package envoyadmin

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	quicv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/quic/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/test/certs"
)

// The tests here (and only tests) use go-control-plane: to print admin JSON exactly as protojson
// does, in both field-name styles, and check that the package's own structs read all of it.

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func inlineBytes(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

func file(name string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: name}}
}

func socket(m proto.Message, t *testing.T) *corev3.TransportSocket {
	return &corev3.TransportSocket{Name: "ts", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, m)}}
}

func TestReadsWhatProtojsonWrites(t *testing.T) {
	ca := certs.NewCA(t)
	leaf := ca.Leaf(t, certs.WithDNSNames("a.example.com"))
	t0 := time.Date(2026, 11, 3, 4, 5, 6, 789e6, time.UTC)

	certSecret := &tlsv3.Secret{Name: "cert", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: inlineBytes(leaf.CertPEM),
		PrivateKey:       inlineBytes([]byte(redacted)),
		WatchedDirectory: &corev3.WatchedDirectory{Path: "/certs"},
	}}}
	spiffe := &tlsv3.SPIFFECertValidatorConfig{TrustDomains: []*tlsv3.SPIFFECertValidatorConfig_TrustDomain{{
		Name: "td.local", TrustBundle: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(ca.CertPEM)}},
	}}}
	caSecret := &tlsv3.Secret{Name: "ca", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		CustomValidatorConfig: &corev3.TypedExtensionConfig{Name: "envoy.tls.cert_validator.spiffe", TypedConfig: mustAny(t, spiffe)},
	}}}
	fileSecret := &tlsv3.Secret{Name: "files", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: file("/etc/tls.crt"), PrivateKey: file("/etc/tls.key"),
	}}}
	secrets := &adminv3.SecretsConfigDump{
		StaticSecrets: []*adminv3.SecretsConfigDump_StaticSecret{
			{Name: "cert", LastUpdated: timestamppb.New(t0), Secret: mustAny(t, certSecret)},
		},
		DynamicActiveSecrets: []*adminv3.SecretsConfigDump_DynamicSecret{
			{Name: "ca", VersionInfo: "v7", LastUpdated: timestamppb.New(t0.Add(time.Hour)), Secret: mustAny(t, caSecret)},
			{Name: "files", VersionInfo: "v8", Secret: mustAny(t, fileSecret)},
		},
		DynamicWarmingSecrets: []*adminv3.SecretsConfigDump_DynamicSecret{{Name: "w", VersionInfo: "uninitialized"}},
	}

	downstream := &tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificates: []*tlsv3.TlsCertificate{{CertificateChain: file("/c.pem")}, {CertificateChain: inlineBytes(leaf.CertPEM)}},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "cert", SdsConfig: &corev3.ConfigSource{
				ConfigSourceSpecifier: &corev3.ConfigSource_PathConfigSource{PathConfigSource: &corev3.PathConfigSource{
					Path: "/sds/c.yaml", WatchedDirectory: &corev3.WatchedDirectory{Path: "/sds"},
				}},
			}}},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{TrustedCa: file("/ca.pem")},
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "ca"},
			}},
		},
	}
	quic := &quicv3.QuicDownstreamTransport{DownstreamTlsContext: &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "q"}},
		ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{TrustedCa: file("/q-ca.pem")}},
	}}}
	listener := &listenerv3.Listener{
		Name: "l",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8443},
		}}},
		FilterChains: []*listenerv3.FilterChain{
			{Name: "tls", FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{"a.example.com"}}, TransportSocket: socket(downstream, t)},
			{Name: "quic", TransportSocket: socket(quic, t)},
			{Name: "upstream", TransportSocket: socket(&tlsv3.UpstreamTlsContext{Sni: "x"}, t)},
			{Name: "plain"},
		},
		DefaultFilterChain: &listenerv3.FilterChain{Name: "default", TransportSocket: socket(&tlsv3.DownstreamTlsContext{
			CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "d"}}},
		}, t)},
	}
	listeners := &adminv3.ListenersConfigDump{
		StaticListeners:  []*adminv3.ListenersConfigDump_StaticListener{{Listener: mustAny(t, listener)}},
		DynamicListeners: []*adminv3.ListenersConfigDump_DynamicListener{{Name: "l", WarmingState: &adminv3.ListenersConfigDump_DynamicListenerState{Listener: mustAny(t, listener)}}},
	}
	dump := &adminv3.ConfigDump{Configs: []*anypb.Any{mustAny(t, secrets), mustAny(t, listeners)}}

	wantSecrets := []secretSummary{
		{Name: "cert", State: "static", LastUpdated: t0, ChainSerials: serials([]*x509.Certificate{leaf.Cert}), WatchedDir: "/certs", KeyRedacted: true, HasCert: true},
		{Name: "ca", State: "active", Version: "v7", LastUpdated: t0.Add(time.Hour), HasVal: true,
			SPIFFE: map[string][]string{"td.local": {pki.SerialHex(ca.Cert.SerialNumber)}}},
		{Name: "files", State: "active", Version: "v8", CertFile: "/etc/tls.crt", KeyFile: "/etc/tls.key", HasCert: true},
		{Name: "w", State: "warming", Version: "uninitialized"},
	}
	chains := func(state string) []envoystate.FilterChainTLS {
		return []envoystate.FilterChainTLS{
			{
				Listener: "l", State: state, Address: "0.0.0.0:8443", FilterChain: "tls", ServerNames: []string{"a.example.com"},
				SDSCertNames: []string{"cert"}, SDSCertSources: []envoystate.SDSSource{{Name: "cert", Path: "/sds/c.yaml", WatchedDir: "/sds"}},
				CertFiles: []string{"/c.pem", "<inline>"}, InlineCerts: []*x509.Certificate{leaf.Cert},
				SDSValidationName: "ca", CAFile: "/ca.pem", RequireClientCert: true,
			},
			{Listener: "l", State: state, Address: "0.0.0.0:8443", FilterChain: "quic", SDSCertNames: []string{"q"}, CAFile: "/q-ca.pem"},
			{Listener: "l", State: state, Address: "0.0.0.0:8443", FilterChain: "default", SDSCertNames: []string{"d"}},
		}
	}
	wantListeners := append(chains("static"), chains("warming")...)

	for name, protoNames := range map[string]bool{"ProtoNames": true, "JSONNames": false} {
		t.Run(name, func(t *testing.T) {
			body, err := protojson.MarshalOptions{UseProtoNames: protoNames, Multiline: true}.Marshal(dump)
			if err != nil {
				t.Fatal(err)
			}
			gotS, gotL, skipped, err := ParseConfigDumpDetail(body)
			if err != nil || len(skipped) > 0 {
				t.Fatalf("ParseConfigDumpDetail: err %v, skipped %q", err, skipped)
			}
			if diff := cmp.Diff(wantSecrets, summarize(gotS)); diff != "" {
				t.Errorf("secrets (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantListeners, gotL); diff != "" {
				t.Errorf("listeners (-want +got):\n%s", diff)
			}

			lj, err := protojson.MarshalOptions{UseProtoNames: protoNames}.Marshal(listener)
			if err != nil {
				t.Fatal(err)
			}
			fcs, err := ParseListenerJSON(lj)
			if err != nil {
				t.Fatalf("ParseListenerJSON: %v", err)
			}
			if diff := cmp.Diff(chains(""), fcs); diff != "" {
				t.Errorf("ParseListenerJSON (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadsCertsProtojsonWrites(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &adminv3.Certificates{Certificates: []*adminv3.Certificate{{
		CaCert: []*adminv3.CertificateDetails{{Path: "/ca.pem", SerialNumber: "abcdef01", DaysUntilExpiration: 1 << 40, ExpirationTime: timestamppb.New(t0.Add(1e6 * time.Hour))}},
		CertChain: []*adminv3.CertificateDetails{{
			Path: "<inline>", SerialNumber: "0a0b0c", ValidFrom: timestamppb.New(t0), ExpirationTime: timestamppb.New(t0.Add(48 * time.Hour)),
			DaysUntilExpiration: 2,
			SubjectAltNames: []*adminv3.SubjectAlternateName{
				{Name: &adminv3.SubjectAlternateName_Dns{Dns: "a.example.com"}},
				{Name: &adminv3.SubjectAlternateName_Uri{Uri: "spiffe://td/a"}},
				{Name: &adminv3.SubjectAlternateName_IpAddress{IpAddress: "127.0.0.1"}},
			},
		}},
	}}}
	want := []envoystate.TLSContext{{
		CA: []envoystate.CertDetail{{Path: "/ca.pem", Serial: hexInt("abcdef01"), SerialText: "abcdef01", DaysUntilExpiration: 1 << 40, Expiration: t0.Add(1e6 * time.Hour)}},
		Chain: []envoystate.CertDetail{{
			Path: "<inline>", Serial: hexInt("0a0b0c"), SerialText: "0a0b0c", ValidFrom: t0, Expiration: t0.Add(48 * time.Hour),
			DaysUntilExpiration: 2, DNSNames: []string{"a.example.com"}, URIs: []string{"spiffe://td/a"}, IPAddresses: []string{"127.0.0.1"},
		}},
	}}
	for name, protoNames := range map[string]bool{"ProtoNames": true, "JSONNames": false} {
		t.Run(name, func(t *testing.T) {
			body, err := protojson.MarshalOptions{UseProtoNames: protoNames}.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseCerts(body)
			if err != nil {
				t.Fatalf("ParseCerts(%s): %v", body, err)
			}
			if diff := cmp.Diff(want, got, certCmp); diff != "" {
				t.Errorf("ParseCerts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBadValuesNameTheField feeds values of the wrong shape: each entry is skipped (or /certs
// fails) with an error that names the field's path, never a panic, never the value of a bytes
// field (it might be key material).
func TestBadValuesNameTheField(t *testing.T) {
	const secretT = `"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"`
	dyn := func(secret string) string {
		return `{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump",
			"dynamic_active_secrets": [{"name": "bad", "secret": {` + secretT + `, ` + secret + `}}, {"name": "ok"}]}]}`
	}
	cases := map[string]struct {
		reason  string
		body    string
		certs   bool // a /certs body
		secrets int  // how many secrets the dump yields
		want    []string
		withold string
	}{
		"BadBase64": {
			reason:  "inline_bytes must be base64",
			body:    dyn(`"tls_certificate": {"certificate_chain": {"inline_bytes": "LS0tLS1CRUdJTi!!!BQUklWQVRFIEtFWS0tLS0t"}}`),
			secrets: 2,
			want:    []string{`secret "bad"`, "tls_certificate.certificate_chain.inline_bytes: ", "base64"},
			withold: "LS0tLS1CRUdJTi",
		},
		"BytesNotString": {
			reason:  "inline_bytes given as a number",
			body:    dyn(`"tls_certificate": {"certificate_chain": {"inline_bytes": 12}}`),
			secrets: 2,
			want:    []string{"tls_certificate.certificate_chain.inline_bytes: number"},
		},
		"StringNotObject": {
			reason:  "a message given as a string",
			body:    dyn(`"validation_context": "ca.pem"`),
			secrets: 2,
			want:    []string{"validation_context: string", "object"},
		},
		"AnyNotObject": {
			reason: "an Any that is not an object",
			body: `{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump",
				"static_secrets": [{"name": "bad", "secret": [1]}]}]}`,
			secrets: 1,
			want:    []string{`secret "bad"`, "secret: array", "@type"},
		},
		"TypeNotString": {
			reason: "@type must be a string",
			body:   `{"configs": [{"@type": 7}]}`,
			want:   []string{"skipped configs[0]: ", "@type"},
		},
		"NestedAnyField": {
			reason: "a bad field inside an Any inside an Any keeps its whole path",
			body: dyn(`"validation_context": {"custom_validator_config": {"name": "spiffe", "typed_config": {
				"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.SPIFFECertValidatorConfig", "trust_domains": {}}}}`),
			secrets: 2,
			want:    []string{"validation_context.custom_validator_config.typed_config.trust_domains: object", "array"},
		},
		"PortNotNumber": {
			reason: "port_value must be a number or a numeric string",
			body: `{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump", "static_listeners": [{"listener": {
				"@type": "type.googleapis.com/envoy.config.listener.v3.Listener", "name": "l",
				"address": {"socket_address": {"address": "::", "port_value": "https"}}}}]}]}`,
			want: []string{"skipped configs[0].static_listeners[0].listener.address.socket_address.port_value: ", "unsigned integer"},
		},
		"BadLastUpdated": {
			reason:  "a bad timestamp of a secret entry is reported, the secret kept",
			body:    `{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump", "dynamic_active_secrets": [{"name": "ok", "last_updated": 5}]}]}`,
			secrets: 1,
			want:    []string{"skipped configs[0].dynamic_active_secrets[0].last_updated: number 5", "RFC 3339"},
		},
		"BadTimestamp": {
			reason: "valid_from must be RFC 3339",
			certs:  true,
			body:   `{"certificates": [{"cert_chain": [{"valid_from": "2020-13-01", "expiration_time": "2030-01-01T00:00:00Z"}]}]}`,
			want:   []string{"certificates[0].cert_chain[0].valid_from: ", "RFC 3339"},
		},
		"NegativeDays": {
			reason: "days_until_expiration is unsigned",
			certs:  true,
			body:   `{"certificates": [{"ca_cert": [{"days_until_expiration": -1, "expiration_time": "2030-01-01T00:00:00Z"}]}]}`,
			want:   []string{"certificates[0].ca_cert[0].days_until_expiration: number -1"},
		},
		"SANNotObject": {
			reason: "subject_alt_names holds objects",
			certs:  true,
			body:   `{"certificates": [{"cert_chain": [{"subject_alt_names": ["a.example.com"], "expiration_time": "2030-01-01T00:00:00Z"}]}]}`,
			want:   []string{"certificates[0].cert_chain[0].subject_alt_names: string", "object"},
		},
		"ChainNotArray": {
			reason: "cert_chain is an array",
			certs:  true,
			body:   `{"certificates": [{"cert_chain": {"path": "x"}}]}`,
			want:   []string{"certificates[0].cert_chain: object", "array"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var msg string
			if tc.certs {
				ctxs, err := ParseCerts([]byte(tc.body))
				if err != nil {
					t.Fatalf("%s: ParseCerts: %v, want the problem on its entry", tc.reason, err)
				}
				got := certProblems(ctxs)
				if len(got) != 1 {
					t.Fatalf("%s: problems %q, want one", tc.reason, got)
				}
				msg = got[0]
			} else {
				secrets, listeners, skipped, err := ParseConfigDumpDetail([]byte(tc.body))
				if err != nil {
					t.Fatalf("%s: ParseConfigDump: %v, want the problem reported with its part", tc.reason, err)
				}
				got := problems(secrets, listeners, skipped)
				if len(got) != 1 {
					t.Fatalf("%s: problems %q, want one", tc.reason, got)
				}
				if strings.Contains(tc.body, `"name": "ok"`) && (len(secrets) != tc.secrets || secrets[len(secrets)-1].Name != "ok") {
					t.Errorf("%s: secrets %v, want %d, the good one last", tc.reason, secrets, tc.secrets)
				}
				msg = got[0]
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s: error %q does not mention %q", tc.reason, msg, w)
				}
			}
			if tc.withold != "" && strings.Contains(msg, tc.withold) {
				t.Errorf("%s: error %q echoes the bytes value", tc.reason, msg)
			}
		})
	}
}

// TestUnknownIsSkippedNotFailed: unknown fields are ignored wherever they are, including inside
// known messages and as unknown Any types deep in a listener; an unknown Any payload is never
// decoded, so its fields may have any shape.
func TestUnknownIsSkippedNotFailed(t *testing.T) {
	body := `{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump", "future_field": {"x": [1]},
	  "static_listeners": [{"future": 1, "listener": {
	    "@type": "type.googleapis.com/envoy.config.listener.v3.Listener", "name": "l", "new_thing": "x",
	    "address": {"envoy_internal_address": {"server_listener_name": "i"}},
	    "listener_filters": [{"name": "tls_inspector", "typed_config": {"@type": "type.googleapis.com/vendor.Inspector", "port_value": "not a number"}}],
	    "filter_chains": [{"name": "a", "filters": [{"typed_config": {"@type": "type.googleapis.com/vendor.Filter", "tls_certificates": 3}}],
	      "transport_socket": {"typed_config": {"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
	        "ocsp_staple_policy": "STRICT_STAPLING", "brand_new": {"nested": true},
	        "common_tls_context": {"tls_certificate_sds_secret_configs": [{"name": "s", "sds_config": {"ads": {}, "new": 1}}]}}}}]}}]}]}`
	_, listeners, skipped, err := ParseConfigDumpDetail([]byte(body))
	if err != nil || len(skipped) > 0 {
		t.Fatalf("err %v, skipped %q: want unknown fields and types ignored", err, skipped)
	}
	want := []envoystate.FilterChainTLS{{Listener: "l", State: "static", FilterChain: "a", SDSCertNames: []string{"s"}}}
	if diff := cmp.Diff(want, listeners); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
}

func TestBytesEncodings(t *testing.T) {
	// Raw bytes whose base64 uses both of the characters that differ between the alphabets.
	raw := []byte{0xfb, 0xff, 0xbe, 0x00, 0x01}
	cases := map[string]string{
		"StdPadded":   base64.StdEncoding.EncodeToString(raw),
		"StdRaw":      base64.RawStdEncoding.EncodeToString(raw),
		"URLPadded":   base64.URLEncoding.EncodeToString(raw),
		"URLRaw":      base64.RawURLEncoding.EncodeToString(raw),
		"EmptyString": "",
	}
	for name, enc := range cases {
		t.Run(name, func(t *testing.T) {
			var got pbBytes
			if err := json.Unmarshal([]byte(`"`+enc+`"`), &got); err != nil {
				t.Fatalf("decode %q: %v", enc, err)
			}
			want := raw
			if enc == "" {
				want = nil
			}
			if diff := cmp.Diff(pbBytes(want), got, cmp.Comparer(func(a, b pbBytes) bool { return string(a) == string(b) })); diff != "" {
				t.Errorf("decode %q (-want +got):\n%s", enc, diff)
			}
		})
	}
	for _, bad := range []string{`"a"`, `"ab=c"`, `"+_/-"`, `"a b"`} {
		var got pbBytes
		if err := json.Unmarshal([]byte(bad), &got); err == nil {
			t.Errorf("decode %s: no error", bad)
		}
	}
}

func TestScalarForms(t *testing.T) {
	uints := map[string]struct {
		in      string
		want    uint64
		wantErr bool
	}{
		"Number":       {in: `443`, want: 443},
		"String":       {in: `"18446744073709551615"`, want: 1<<64 - 1},
		"Exponent":     {in: `4.43e2`, want: 443},
		"Null":         {in: `null`},
		"Negative":     {in: `-1`, wantErr: true},
		"Fraction":     {in: `1.5`, wantErr: true},
		"Word":         {in: `"https"`, wantErr: true},
		"Bool":         {in: `true`, wantErr: true},
		"Overflow":     {in: `"18446744073709551616"`, wantErr: true},
		"HugeExponent": {in: `1e30`, wantErr: true},
	}
	for name, tc := range uints {
		t.Run("Uint"+name, func(t *testing.T) {
			var got pbUint
			err := json.Unmarshal([]byte(tc.in), &got)
			if (err != nil) != tc.wantErr {
				t.Fatalf("decode %s: err %v, want error %v", tc.in, err, tc.wantErr)
			}
			if uint64(got) != tc.want {
				t.Errorf("decode %s = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
	times := map[string]struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		"UTC":       {in: `"2026-11-03T04:05:06Z"`, want: time.Date(2026, 11, 3, 4, 5, 6, 0, time.UTC)},
		"Nanos":     {in: `"2026-11-03T04:05:06.123456789Z"`, want: time.Date(2026, 11, 3, 4, 5, 6, 123456789, time.UTC)},
		"Offset":    {in: `"2026-11-03T06:05:06+02:00"`, want: time.Date(2026, 11, 3, 4, 5, 6, 0, time.UTC)},
		"Null":      {in: `null`},
		"DateOnly":  {in: `"2026-11-03"`, wantErr: true},
		"Number":    {in: `1700000000`, wantErr: true},
		"NoZone":    {in: `"2026-11-03T04:05:06"`, wantErr: true},
		"BadMonth":  {in: `"2026-13-03T04:05:06Z"`, wantErr: true},
		"EpochKept": {in: `"1970-01-01T00:00:00Z"`, want: time.Unix(0, 0).UTC()},
	}
	for name, tc := range times {
		t.Run("Time"+name, func(t *testing.T) {
			var got pbTime
			err := json.Unmarshal([]byte(tc.in), &got)
			if (err != nil) != tc.wantErr {
				t.Fatalf("decode %s: err %v, want error %v", tc.in, err, tc.wantErr)
			}
			if !got.Equal(tc.want) || got.Location() != tc.want.Location() {
				t.Errorf("decode %s = %v, want %v", tc.in, got.Time, tc.want)
			}
		})
	}
}

func TestSnakeKeys(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"ProtoNamesUnchanged": {in: `{"filter_chains": [{"@type": "x"}]}`, want: `{"filter_chains": [{"@type": "x"}]}`},
		"JSONNames":           {in: `{"filterChains":[{"filterChainMatch":{"serverNames":["a"]}}]}`, want: `{"filter_chains":[{"filter_chain_match":{"server_names":["a"]}}]}`},
		"ValuesUntouched":     {in: `{"name": "camelCase", "list": ["fooBar", "x:y"]}`, want: `{"name": "camelCase", "list": ["fooBar", "x:y"]}`},
		"SpaceBeforeColon":    {in: "{\"portValue\" \n: 1}", want: "{\"port_value\" \n: 1}"},
		"EscapedQuote":        {in: `{"a": "q\"fooBar\": ", "inlineBytes": "x"}`, want: `{"a": "q\"fooBar\": ", "inline_bytes": "x"}`},
		"NotJSONNames":        {in: `{"ISTIO_VERSION": 1, "Name": 2, "a-bC": 3, "x509Cert": 4}`, want: `{"ISTIO_VERSION": 1, "Name": 2, "a-bC": 3, "x509_cert": 4}`},
		"Unterminated":        {in: `{"fooBar": "abc`, want: `{"foo_bar": "abc`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := string(snakeKeys([]byte(tc.in))); got != tc.want {
				t.Errorf("snakeKeys(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}
