package envoyadmin

// Issue 13, "no silent clean": every shape Envoy and its front-ends print is read, and whatever
// cannot be read is reported on the object it belongs to or in the skipped parts, naming the field.
// The inputs are mutations of the recorded outputs (testdata/real-*, testdata/fixtures).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/probe/envoystate"
)

// doc decodes a recorded body for mutation (numbers kept as written).
func doc(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(stripHeader(b)))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode recording: %v", err)
	}
	return v
}

func encode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// at walks v by object keys and array indexes; it fails the test when the path is not there.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok || m[k] == nil {
				t.Fatalf("recording has no %q along %v", k, path)
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				t.Fatalf("recording has no [%d] along %v", k, path)
			}
			v = a[k]
		}
	}
	return v
}

func obj(t *testing.T, v any, path ...any) map[string]any {
	t.Helper()
	m, ok := at(t, v, path...).(map[string]any)
	if !ok {
		t.Fatalf("%v is not an object", path)
	}
	return m
}

// rewrite returns v with every object key passed through key and every "@type" value through typ.
func rewrite(v any, key func(string) string, typ func(string) (string, bool)) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if k == "@type" {
				if s, ok := e.(string); ok {
					if n, keep := typ(s); keep {
						out[k] = n
					}
					continue
				}
			}
			out[key(k)] = rewrite(e, key, typ)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = rewrite(e, key, typ)
		}
		return out
	}
	return v
}

func sameKey(k string) string          { return k }
func sameType(s string) (string, bool) { return s, true }

// lowerCamel is protojson's JSON name of a proto field name.
func lowerCamel(k string) string {
	parts := strings.Split(k, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// v2Types maps v3 type URLs to the v2 names old Envoys printed.
func v2Types(s string) (string, bool) {
	for v2, v3 := range legacyTypes {
		if strings.HasSuffix(s, "/"+v3) {
			return "type.googleapis.com/" + v2, true
		}
	}
	return s, true
}

// TestDumpShapesReadAlike: the same secrets and listeners, printed the ways older Envoys and
// istioctl print them, read the same and report nothing skipped.
func TestDumpShapesReadAlike(t *testing.T) {
	sources := map[string]string{
		"Istio":     "fixtures/config_dump_secrets_istio_istioctl_testdata.json",
		"SPIRE":     "fixtures/config_dump_secrets_spire_istioctl_testdata.json",
		"Real1.40":  "real-1.40.0/config_dump.json",
		"Real1.36":  "real-1.36.2/config_dump.json",
		"Resources": "real-1.40.0/config_dump_resource_dynamic_active_secrets.json",
	}
	shapes := map[string]func(t *testing.T, v any) any{
		// v2alpha-era dumps: the secret and listener messages themselves where v3 has an Any.
		"SecretsAndListenersWithoutType": func(t *testing.T, v any) any {
			for _, c := range at(t, v, "configs").([]any) {
				c := c.(map[string]any)
				for _, list := range []string{"static_secrets", "dynamic_active_secrets", "dynamic_warming_secrets"} {
					l, _ := c[list].([]any)
					for _, e := range l {
						if s, ok := e.(map[string]any)["secret"].(map[string]any); ok {
							delete(s, "@type")
						}
					}
				}
				if s, ok := c["secret"].(map[string]any); ok { // ?resource= form
					delete(s, "@type")
				}
				l, _ := c["static_listeners"].([]any)
				for _, e := range l {
					delete(e.(map[string]any)["listener"].(map[string]any), "@type")
				}
			}
			return v
		},
		"V2TypeURLs": func(t *testing.T, v any) any { return rewrite(v, sameKey, v2Types) },
		"CamelCase":  func(t *testing.T, v any) any { return rewrite(v, lowerCamel, sameType) },
		"CamelCaseV2": func(t *testing.T, v any) any {
			return rewrite(v, lowerCamel, v2Types)
		},
		// What `istioctl proxy-config secret -o json` prints: the SecretsConfigDump alone, no
		// "configs", no "@type", lowerCamelCase.
		"IstioctlSecretJSON": func(t *testing.T, v any) any {
			for _, c := range at(t, v, "configs").([]any) {
				if strings.HasSuffix(c.(map[string]any)["@type"].(string), ".SecretsConfigDump") {
					return rewrite(c, lowerCamel, func(s string) (string, bool) {
						return s, !strings.HasSuffix(s, ".SecretsConfigDump")
					})
				}
			}
			return nil
		},
		"ConfigsWithoutType": func(t *testing.T, v any) any {
			for _, c := range at(t, v, "configs").([]any) {
				m := c.(map[string]any)
				if t := m["@type"].(string); strings.HasSuffix(t, ".SecretsConfigDump") || strings.HasSuffix(t, ".ListenersConfigDump") || strings.HasSuffix(t, ".ClustersConfigDump") {
					delete(m, "@type")
				}
			}
			return v
		},
	}
	for src, file := range sources {
		body := readTestdata(t, file)
		wantS, wantL, wantSkipped, err := ParseConfigDumpDetail(stripHeader(body))
		if err != nil || len(wantSkipped) > 0 || len(wantS) == 0 {
			t.Fatalf("%s as recorded: err %v, skipped %v, %d secrets", src, err, wantSkipped, len(wantS))
		}
		for name, shape := range shapes {
			if src == "Resources" && (name == "IstioctlSecretJSON" || name == "ConfigsWithoutType") {
				continue // ?resource= entries are single secrets, not dumps
			}
			t.Run(src+"/"+name, func(t *testing.T) {
				v := shape(t, doc(t, body))
				if v == nil {
					t.Fatal("no SecretsConfigDump in the recording")
				}
				gotS, gotL, skipped, err := ParseConfigDumpDetail(encode(t, v))
				if err != nil {
					t.Fatalf("ParseConfigDump: %v", err)
				}
				if p := problems(gotS, gotL, skipped); len(p) > 0 {
					t.Errorf("problems %q, want none", p)
				}
				if diff := cmp.Diff(summarize(wantS), summarize(gotS)); diff != "" {
					t.Errorf("secrets (-as recorded +%s):\n%s", name, diff)
				}
				wl := wantL
				if name == "IstioctlSecretJSON" {
					wl = nil
				}
				if diff := cmp.Diff(wl, gotL, certCmp); diff != "" {
					t.Errorf("listeners (-as recorded +%s):\n%s", name, diff)
				}
			})
		}
	}
}

// pemOf returns the PEM text of an inline DataSource of the recording.
func pemOf(t *testing.T, ds map[string]any) string {
	t.Helper()
	if s, ok := ds["inline_string"].(string); ok {
		return s
	}
	b, err := base64.StdEncoding.DecodeString(ds["inline_bytes"].(string))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCertificateProblemsOnTheSecret breaks the certificate or CA of one recorded secret in the
// ways a dump can (elided, redacted, truncated, garbage, empty, one bad block of a bundle): the
// secret is still reported, with HasCertificate/HasValidation true and an error naming the field,
// the blocks that parse are kept, and the other secrets are untouched.
func TestCertificateProblemsOnTheSecret(t *testing.T) {
	body := readTestdata(t, "real-1.40.0/config_dump_mask_secrets.json")
	base := doc(t, body)
	chainDS := obj(t, base, "configs", 0, "dynamic_active_secrets", 0, "secret", "tls_certificate", "certificate_chain")
	chainPEM := pemOf(t, chainDS) // leaf and CA
	caPEM := pemOf(t, obj(t, base, "configs", 0, "dynamic_active_secrets", 1, "secret", "validation_context", "trusted_ca"))
	leafPEM := pemOf(t, obj(t, base, "configs", 0, "static_secrets", 0, "secret", "tls_certificate", "certificate_chain"))
	b64 := func(s string) map[string]any {
		return map[string]any{"inline_bytes": base64.StdEncoding.EncodeToString([]byte(s))}
	}
	str := func(s string) map[string]any { return map[string]any{"inline_string": s} }
	truncated := chainPEM[:len(chainPEM)/3]
	badBlock := strings.Replace(chainPEM, "MII", "MIX", 1) // first block's DER broken, second intact

	cases := map[string]struct {
		reason    string
		ca        bool // break the validation context's trusted_ca instead of the chain
		ds        any
		wantField string
		wantIn    string // also in the error
		keep      []string
	}{
		"RedactedBytes":  {reason: "Envoy elided the certificate", ds: b64("[redacted]"), wantField: "tls_certificate.certificate_chain.inline_bytes", wantIn: "[redacted]"},
		"RedactedString": {reason: "elided, inline_string", ds: str("[redacted]"), wantField: "tls_certificate.certificate_chain.inline_string", wantIn: "[redacted]"},
		"Truncated":      {reason: "a truncated PEM", ds: b64(truncated), wantField: "tls_certificate.certificate_chain.inline_bytes"},
		"Garbage":        {reason: "text that is no certificate", ds: str("hello, world"), wantField: "tls_certificate.certificate_chain.inline_string", wantIn: "not PEM"},
		"Empty":          {reason: "nothing inline", ds: b64(""), wantField: "tls_certificate.certificate_chain.inline_bytes", wantIn: "no certificate"},
		"BadBase64":      {reason: "bytes that are not base64", ds: map[string]any{"inline_bytes": "!!!not base64"}, wantField: "tls_certificate.certificate_chain.inline_bytes", wantIn: "base64"},
		"NotADataSource": {reason: "a DataSource of the wrong shape", ds: "cert.pem", wantField: "tls_certificate.certificate_chain", wantIn: "string"},
		"EmptyDataSource": {reason: "a DataSource with nothing in it", ds: map[string]any{},
			wantField: "tls_certificate.certificate_chain", wantIn: "empty"},
		"EnvironmentVariable": {reason: "a chain the dump cannot show", ds: map[string]any{"environment_variable": "CERT"},
			wantField: "tls_certificate.certificate_chain.environment_variable", wantIn: "not in the dump"},
		"ChainBadFirstBlock": {reason: "a chain whose first block is broken keeps the second",
			ds: b64(badBlock), wantField: "tls_certificate.certificate_chain.inline_bytes", wantIn: "certificate 1 of 2", keep: []string{"abcdef01"}},
		"CABundleOneBadBlock": {reason: "a CA bundle with one bad block keeps the good CAs", ca: true,
			ds:        b64(leafPEM + "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" + caPEM),
			wantField: "validation_context.trusted_ca.inline_bytes", wantIn: "certificate 2 of 3", keep: []string{"7f", "abcdef01"}},
		"CARedacted":  {reason: "an elided CA", ca: true, ds: str("[redacted]"), wantField: "validation_context.trusted_ca.inline_string"},
		"CAGarbage":   {reason: "a CA that is not one", ca: true, ds: b64("\x00\x01garbage"), wantField: "validation_context.trusted_ca.inline_bytes"},
		"CANotObject": {reason: "a CA DataSource that is a number", ca: true, ds: 7, wantField: "validation_context.trusted_ca", wantIn: "number"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := doc(t, body)
			target, field, idx := obj(t, v, "configs", 0, "dynamic_active_secrets", 0, "secret", "tls_certificate"), "certificate_chain", 0
			if tc.ca {
				target, field, idx = obj(t, v, "configs", 0, "dynamic_active_secrets", 1, "secret", "validation_context"), "trusted_ca", 1
			}
			target[field] = tc.ds
			secrets, listeners, skipped, err := ParseConfigDumpDetail(encode(t, v))
			if err != nil {
				t.Fatalf("%s: ParseConfigDump: %v", tc.reason, err)
			}
			if len(secrets) != 3 || len(skipped) != 0 {
				t.Fatalf("%s: %d secrets, skipped %v; want all 3 secrets, the problem on one", tc.reason, len(secrets), skipped)
			}
			s := secrets[1+idx] // static first, then the active ones
			if p := problems(secrets, listeners, skipped); len(p) != 1 {
				t.Errorf("%s: problems %q, want one", tc.reason, p)
			}
			got, has, kept := s.ChainErr, s.HasCertificate, serials(s.Chain)
			if tc.ca {
				got, has, kept = s.ValidationCAErr, s.HasValidation, serials(s.ValidationCA)
			}
			if !has {
				t.Errorf("%s: HasCertificate/HasValidation false, want true: something was there", tc.reason)
			}
			if got == nil {
				t.Fatalf("%s: no error on the secret", tc.reason)
			}
			if !strings.HasPrefix(got.Error(), tc.wantField+":") && !strings.HasPrefix(got.Error(), tc.wantField+" ") {
				t.Errorf("%s: error %q, want it to start with the field %s", tc.reason, got, tc.wantField)
			}
			if !strings.Contains(got.Error(), tc.wantIn) {
				t.Errorf("%s: error %q, want it to say %q", tc.reason, got, tc.wantIn)
			}
			if diff := cmp.Diff(tc.keep, kept); diff != "" {
				t.Errorf("%s: certificates kept (-want +got):\n%s", tc.reason, diff)
			}
			for _, leak := range []string{"MII", "hello, world", "AAAA", "garbage", "not base64"} {
				if strings.Contains(got.Error(), leak) {
					t.Errorf("%s: error %q quotes the bytes (%q)", tc.reason, got, leak)
				}
			}
		})
	}
}

// TestUnreadableSecretPayloads: a payload that is no Secret is the Secret's Err, the secret kept
// under its name; a missing chain or a chain only in PKCS#12 is its ChainErr; trust from a
// certificate provider or an unknown validator is its ValidationCAErr.
func TestUnreadableSecretPayloads(t *testing.T) {
	entry := func(secret string) []byte {
		return []byte(`{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump.DynamicSecret",
			"name": "s", "version_info": "1", "secret": ` + secret + `}]}`)
	}
	const secretT = `"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"`
	cases := map[string]struct {
		secret        string
		err, chainErr string
		caErr         string
	}{
		"UnknownType":    {secret: `{"@type": "type.googleapis.com/vendor.Secret", "k": 1}`, err: `secret: unknown type "type.googleapis.com/vendor.Secret"`},
		"NotAnObject":    {secret: `"x"`, err: "secret: string"},
		"NameNotString":  {secret: `{` + secretT + `, "name": 5}`, err: "secret.name: number"},
		"NoChain":        {secret: `{` + secretT + `, "tls_certificate": {"private_key": {"inline_string": "[redacted]"}}}`, chainErr: "tls_certificate.certificate_chain: missing"},
		"PKCS12":         {secret: `{` + secretT + `, "tls_certificate": {"pkcs12": {"inline_string": "[redacted]"}}}`, chainErr: "tls_certificate.pkcs12:"},
		"CertProvider":   {secret: `{` + secretT + `, "validation_context": {"ca_certificate_provider_instance": {"instance_name": "p"}}}`, caErr: "validation_context.ca_certificate_provider_instance:"},
		"UnknownValidat": {secret: `{` + secretT + `, "validation_context": {"custom_validator_config": {"name": "x", "typed_config": {"@type": "type.googleapis.com/vendor.V"}}}}`, caErr: "validation_context.custom_validator_config (\"x\").typed_config: unknown type"},
		"SPIFFEBadBundle": {secret: `{` + secretT + `, "validation_context": {"custom_validator_config": {"name": "spiffe", "typed_config": {
			"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.SPIFFECertValidatorConfig",
			"trust_domains": [{"name": "a.local", "trust_bundle": {"inline_string": "junk"}}]}}}}`,
			caErr: "validation_context.custom_validator_config.typed_config.trust_domains[0] (a.local).trust_bundle.inline_string:"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			secrets, _, skipped, err := ParseConfigDumpDetail(entry(tc.secret))
			if err != nil || len(skipped) > 0 || len(secrets) != 1 {
				t.Fatalf("err %v, skipped %v, %d secrets: want the one secret with its problem", err, skipped, len(secrets))
			}
			s := secrets[0]
			if s.Name != "s" || s.VersionInfo != "1" {
				t.Errorf("secret %q version %q, want s, 1", s.Name, s.VersionInfo)
			}
			for _, c := range []struct {
				what string
				got  error
				want string
			}{{"Err", s.Err, tc.err}, {"ChainErr", s.ChainErr, tc.chainErr}, {"ValidationCAErr", s.ValidationCAErr, tc.caErr}} {
				switch {
				case c.want == "" && c.got != nil:
					t.Errorf("%s = %v, want nil", c.what, c.got)
				case c.want != "" && (c.got == nil || !strings.HasPrefix(c.got.Error(), c.want)):
					t.Errorf("%s = %v, want it to start %q", c.what, c.got, c.want)
				}
			}
			if tc.chainErr != "" && !s.HasCertificate || tc.caErr != "" && !s.HasValidation {
				t.Errorf("HasCertificate %v HasValidation %v, want the part that was there marked", s.HasCertificate, s.HasValidation)
			}
		})
	}
}

// TestListenerTLSProblems: a static listener's inline certificates and validation context are
// read fully (InlineCerts, InlineCA, CAWatchedDir) and what does not read is on the filter chain;
// TLS that the dump does not show (certificate providers, an untyped socket config) is skipped
// with its path, never taken for plaintext.
func TestListenerTLSProblems(t *testing.T) {
	body := readTestdata(t, "real-1.40.0/config_dump_mask_listeners.json")
	secrets := doc(t, readTestdata(t, "real-1.40.0/config_dump_mask_secrets.json"))
	leafPEM := pemOf(t, obj(t, secrets, "configs", 0, "static_secrets", 0, "secret", "tls_certificate", "certificate_chain"))
	caPEM := pemOf(t, obj(t, secrets, "configs", 0, "dynamic_active_secrets", 1, "secret", "validation_context", "trusted_ca"))
	chain := []any{"configs", 0, "static_listeners", 0, "listener", "filter_chains", 0}
	common := append(append([]any(nil), chain...), "transport_socket", "typed_config", "common_tls_context")
	const where = "configs[0].static_listeners[0].listener.filter_chains[0] (static-files)"

	cases := map[string]struct {
		mutate      func(t *testing.T, v any)
		check       func(t *testing.T, f envoystate.FilterChainTLS)
		wantSkipped string // a skipped part, else none
	}{
		"InlineCAAndWatchedDir": {
			mutate: func(t *testing.T, v any) {
				obj(t, v, common...)["validation_context"] = map[string]any{
					"trusted_ca":        map[string]any{"inline_string": caPEM + leafPEM},
					"watched_directory": map[string]any{"path": "/etc/ca"},
				}
			},
			check: func(t *testing.T, f envoystate.FilterChainTLS) {
				if got := serials(f.InlineCA); !cmp.Equal(got, []string{"abcdef01", "7f"}) || f.InlineCAErr != nil || f.CAWatchedDir != "/etc/ca" || f.CAFile != "" {
					t.Errorf("InlineCA %v, InlineCAErr %v, CAWatchedDir %q, CAFile %q; want both CAs, no error, /etc/ca", got, f.InlineCAErr, f.CAWatchedDir, f.CAFile)
				}
			},
		},
		"InlineCABadBlock": {
			mutate: func(t *testing.T, v any) {
				obj(t, v, common...)["validation_context"] = map[string]any{"trusted_ca": map[string]any{
					"inline_bytes": base64.StdEncoding.EncodeToString([]byte(caPEM + "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))}}
			},
			check: func(t *testing.T, f envoystate.FilterChainTLS) {
				if got := serials(f.InlineCA); !cmp.Equal(got, []string{"abcdef01"}) || f.InlineCAErr == nil ||
					!strings.HasPrefix(f.InlineCAErr.Error(), "common_tls_context.validation_context.trusted_ca.inline_bytes: certificate 2 of 2") {
					t.Errorf("InlineCA %v, InlineCAErr %v; want the good CA and an error naming the field and block", got, f.InlineCAErr)
				}
			},
		},
		"CombinedValidationContext": {
			mutate: func(t *testing.T, v any) {
				m := obj(t, v, common...)
				delete(m, "validation_context")
				m["combined_validation_context"] = map[string]any{"default_validation_context": map[string]any{"trusted_ca": "x"}}
			},
			check: func(t *testing.T, f envoystate.FilterChainTLS) {
				if f.InlineCAErr == nil || !strings.HasPrefix(f.InlineCAErr.Error(), "common_tls_context.combined_validation_context.default_validation_context.trusted_ca: string") {
					t.Errorf("InlineCAErr %v, want the field named", f.InlineCAErr)
				}
			},
		},
		"InlineCertsAndOneBad": {
			mutate: func(t *testing.T, v any) {
				obj(t, v, common...)["tls_certificates"] = []any{
					map[string]any{"certificate_chain": map[string]any{"inline_string": leafPEM}, "private_key": map[string]any{"inline_string": "[redacted]"}},
					map[string]any{"certificate_chain": map[string]any{"inline_bytes": base64.StdEncoding.EncodeToString([]byte("[redacted]"))}},
					map[string]any{"certificate_chain": map[string]any{"filename": "/etc/ecdsa.pem"}},
				}
			},
			check: func(t *testing.T, f envoystate.FilterChainTLS) {
				if got := serials(f.InlineCerts); !cmp.Equal(got, []string{"7f"}) || !cmp.Equal(f.CertFiles, []string{"<inline>", "<inline>", "/etc/ecdsa.pem"}) ||
					f.InlineCertsErr == nil || !strings.HasPrefix(f.InlineCertsErr.Error(), "common_tls_context.tls_certificates[1].certificate_chain.inline_bytes:") {
					t.Errorf("InlineCerts %v, CertFiles %v, InlineCertsErr %v; want the good one kept, the second named", got, f.CertFiles, f.InlineCertsErr)
				}
			},
		},
		"CertificateProvider": {
			mutate: func(t *testing.T, v any) {
				obj(t, v, common...)["tls_certificate_provider_instance"] = map[string]any{"instance_name": "p"}
			},
			check:       func(t *testing.T, f envoystate.FilterChainTLS) {},
			wantSkipped: where + ".common_tls_context.tls_certificate_provider_instance",
		},
		"V2SocketConfig": {
			mutate: func(t *testing.T, v any) {
				ts := obj(t, v, append(append([]any(nil), chain...), "transport_socket")...)
				cfg := ts["typed_config"].(map[string]any)
				delete(cfg, "@type")
				delete(ts, "typed_config")
				ts["config"] = cfg
			},
			check: func(t *testing.T, f envoystate.FilterChainTLS) {
				if len(f.CertFiles) != 1 || !strings.HasSuffix(f.CertFiles[0], "/static/tls.crt") || !f.RequireClientCert {
					t.Errorf("CertFiles %v RequireClientCert %v: want the v2 config read", f.CertFiles, f.RequireClientCert)
				}
			},
		},
		"UnknownSocketWithUntypedConfig": {
			mutate: func(t *testing.T, v any) {
				ts := obj(t, v, append(append([]any(nil), chain...), "transport_socket")...)
				ts["name"] = "vendor.socket"
				delete(ts["typed_config"].(map[string]any), "@type")
			},
			wantSkipped: where + ".transport_socket",
		},
		"SocketNotObject": {
			mutate: func(t *testing.T, v any) {
				obj(t, v, chain...)["transport_socket"] = []any{1}
			},
			wantSkipped: where + ".transport_socket",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := doc(t, body)
			tc.mutate(t, v)
			_, listeners, skipped, err := ParseConfigDumpDetail(encode(t, v))
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantSkipped != "" {
				if len(skipped) != 1 || skipped[0].Part != tc.wantSkipped {
					t.Fatalf("skipped %v, want one part %s", skipped, tc.wantSkipped)
				}
			} else if len(skipped) != 0 {
				t.Fatalf("skipped %v, want none", skipped)
			}
			var first *envoystate.FilterChainTLS
			for i := range listeners {
				if listeners[i].FilterChain == "static-files" {
					first = &listeners[i]
				}
			}
			if len(listeners) != 3 && !(tc.check == nil && len(listeners) == 2) {
				t.Errorf("%d filter chains, want the other chains still read", len(listeners))
			}
			if tc.check != nil {
				if first == nil {
					t.Fatal("static-files chain missing")
				}
				tc.check(t, *first)
			}
		})
	}
}

// TestCertsSeveralChainEntries: a context with an RSA and an ECDSA tls_certificate has two
// cert_chain entries in /certs; both are kept, in order, with their own SANs.
func TestCertsSeveralChainEntries(t *testing.T) {
	v := doc(t, readTestdata(t, "real-1.40.0/certs.json"))
	ctxs := at(t, v, "certificates").([]any)
	first := obj(t, ctxs[0], "cert_chain", 0)
	second := obj(t, ctxs[1], "cert_chain", 0)
	obj(t, ctxs[1])["cert_chain"] = []any{second, first}
	got, err := ParseCerts(encode(t, v))
	if err != nil {
		t.Fatal(err)
	}
	var serialsGot, dns []string
	for _, d := range got[1].Chain {
		serialsGot = append(serialsGot, d.SerialText)
		dns = append(dns, d.DNSNames...)
		if d.Err != nil {
			t.Errorf("%s: %v", d.SerialText, d.Err)
		}
	}
	if want := []string{second["serial_number"].(string), first["serial_number"].(string)}; !cmp.Equal(want, serialsGot) {
		t.Errorf("chain serials %v, want %v", serialsGot, want)
	}
	if want := []string{"static.example.com", "inline.example.com"}; !cmp.Equal(want, dns) {
		t.Errorf("chain DNS names %v, want %v", dns, want)
	}
	if len(got[1].CA) != 1 {
		t.Errorf("CA %v, want the one CA", got[1].CA)
	}
}

// TestCertDetailProblems: a /certs entry whose fields do not read keeps the fields that do and
// says which did not; no zero value passes for a real one.
func TestCertDetailProblems(t *testing.T) {
	cases := map[string]struct {
		set   map[string]any // fields replaced in the recorded entry
		drop  string
		want  []string
		check func(d envoystate.CertDetail) string
	}{
		"SerialNotHex": {set: map[string]any{"serial_number": "0x12zz"}, want: []string{".serial_number: ", "not hex"},
			check: func(d envoystate.CertDetail) string {
				if d.Serial != nil || d.SerialText != "0x12zz" || d.Expiration.IsZero() {
					return "want Serial nil, the text and the expiration kept"
				}
				return ""
			}},
		"SerialEmpty":      {set: map[string]any{"serial_number": ""}, want: []string{".serial_number: "}},
		"SerialNotString":  {set: map[string]any{"serial_number": 258}, want: []string{".serial_number: number where a string expected"}},
		"ExpirationNotRFC": {set: map[string]any{"expiration_time": "Dec  2 04:04:48 2026 GMT"}, want: []string{".expiration_time: string", "RFC 3339"}},
		"ExpirationMissing": {drop: "expiration_time", want: []string{".expiration_time: missing"},
			check: func(d envoystate.CertDetail) string {
				if d.Serial == nil || d.ValidFrom.IsZero() {
					return "want the other fields kept"
				}
				return ""
			}},
		"ValidFromBad": {set: map[string]any{"valid_from": 1}, want: []string{".valid_from: number 1"}},
		"DaysBad":      {set: map[string]any{"days_until_expiration": "soon"}, want: []string{".days_until_expiration: string"}},
		"PathNotString": {set: map[string]any{"path": []any{}}, want: []string{".path: array"},
			check: func(d envoystate.CertDetail) string {
				if d.SerialText != "0102" {
					return "want the serial kept"
				}
				return ""
			}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := doc(t, readTestdata(t, "real-1.40.0/certs.json"))
			e := obj(t, v, "certificates", 1, "cert_chain", 0)
			for k, x := range tc.set {
				e[k] = x
			}
			delete(e, tc.drop)
			got, err := ParseCerts(encode(t, v))
			if err != nil {
				t.Fatalf("ParseCerts: %v, want the problem on the certificate", err)
			}
			if p := certProblems(got); len(p) != 1 {
				t.Fatalf("problems %q, want one", p)
			}
			d := got[1].Chain[0]
			if d.Err == nil {
				t.Fatal("no Err on the certificate")
			}
			if !strings.HasPrefix(d.Err.Error(), "certificates[1].cert_chain[0].") {
				t.Errorf("Err %q, want it to name the entry", d.Err)
			}
			for _, w := range tc.want {
				if !strings.Contains(d.Err.Error(), w) {
					t.Errorf("Err %q, want it to say %q", d.Err, w)
				}
			}
			if tc.check != nil {
				if msg := tc.check(d); msg != "" {
					t.Errorf("%+v: %s", d, msg)
				}
			}
		})
	}
}

// TestSkippedPartsNamed: parts that belong to no secret or listener are skipped with their path
// and a reason, whatever spelling the dump used.
func TestSkippedPartsNamed(t *testing.T) {
	cases := map[string]struct {
		body string
		want []envoystate.ConfigSkip
	}{
		"UnknownDump": {
			body: `{"configs": [{"@type": "type.googleapis.com/vendor.PrivateConfigDump"}]}`,
			want: []envoystate.ConfigSkip{{Part: "configs[0]", Reason: `unknown type "type.googleapis.com/vendor.PrivateConfigDump"`}},
		},
		"UntypedUnknown": {
			body: `{"configs": [{"foo": 1}]}`,
			want: []envoystate.ConfigSkip{{Part: "configs[0]", Reason: "no @type, and its fields are not those of a secrets or listeners dump"}},
		},
		"CamelCaseBadEntry": {
			body: `{"dynamicActiveSecrets": [{"name": "a"}, {"name": 5}]}`,
			want: []envoystate.ConfigSkip{{Part: "dynamic_active_secrets[1].name", Reason: "number where a string expected"}},
		},
		"ListenerUnknownType": {
			body: `{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump", "dynamicListeners": [{"name": "l", "activeState": {"listener": {"@type": "type.googleapis.com/vendor.Listener"}}}]}]}`,
			want: []envoystate.ConfigSkip{{Part: "configs[0].dynamic_listeners[0].active_state.listener", Reason: `unknown type "type.googleapis.com/vendor.Listener"`}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, skipped, err := ParseConfigDumpDetail([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, skipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
		})
	}
	if s := (envoystate.ConfigSkip{Part: "a.b", Reason: "why"}).String(); s != "a.b: why" {
		t.Errorf("String() = %q", s)
	}
}
