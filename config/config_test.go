package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLoadGood(t *testing.T) {
	got, err := Load(filepath.Join("testdata", "good.yaml"))
	if err != nil {
		t.Fatalf("Load(good.yaml): %v", err)
	}
	want := &Config{
		Desired: []Desired{
			{Name: "frontend-tls", Dir: "/etc/certs/frontend"},
			{Name: "mesh-ca", CAFile: "/etc/certs/mesh/ca.crt"},
		},
		Envoys: []Envoy{{
			Name:  "edge-1",
			Admin: "http://127.0.0.1:9901",
			Endpoints: []Endpoint{{
				Address: "127.0.0.1:8443",
				SNI:     []string{"shop.example.com", "www.example.com"},
				Source:  "frontend-tls",
			}},
			Bindings: []Binding{{Source: "frontend-tls", Secret: "frontend"}},
		}},
		Pairings: []Pairing{{
			Name:   "edge-trusts-frontend",
			Bundle: Ref{Source: "mesh-ca"},
			Leaf:   Ref{Source: "frontend-tls"},
		}},
		Policy: Policy{
			// Set in the file:
			Grace:           Duration(90 * time.Second),
			ExpiringWarning: Duration(720 * time.Hour),
			// Defaults:
			ExpiringCritical:                DefaultPolicy.ExpiringCritical,
			ExpiringWarningLifetimePercent:  DefaultPolicy.ExpiringWarningLifetimePercent,
			ExpiringCriticalLifetimePercent: DefaultPolicy.ExpiringCriticalLifetimePercent,
			MaxBundleCAs:                    DefaultPolicy.MaxBundleCAs,
			MinRSABits:                      DefaultPolicy.MinRSABits,
			Timeout:                         DefaultPolicy.Timeout,
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load(good.yaml): -want +got:\n%s", diff)
	}
}

func TestLoadDefaults(t *testing.T) {
	got, err := Load(filepath.Join("testdata", "minimal.yaml"))
	if err != nil {
		t.Fatalf("Load(minimal.yaml): %v", err)
	}
	if diff := cmp.Diff(DefaultPolicy, got.Policy); diff != "" {
		t.Errorf("policy of a file without one should be DefaultPolicy: -want +got:\n%s", diff)
	}
	for name, d := range map[string]Duration{
		"expiring_warning": got.Policy.ExpiringWarning, "expiring_critical": got.Policy.ExpiringCritical,
		"grace": got.Policy.Grace, "timeout": got.Policy.Timeout,
	} {
		if d <= 0 {
			t.Errorf("default policy.%s = %s, want > 0", name, d.D())
		}
	}
}

// TestLoadErrors checks the properties of each error: what it must name so a person can find
// the problem, never the whole message.
func TestLoadErrors(t *testing.T) {
	tests := map[string]struct {
		reason   string
		file     string
		contains []string
	}{
		"UnknownField": {
			reason:   "strict decoding must name the misspelled field and its line",
			file:     "unknown_field.yaml",
			contains: []string{"cert_flie", "line 4"},
		},
		"BadDuration": {
			reason:   "a duration that is not a Go duration names its line",
			file:     "bad_duration.yaml",
			contains: []string{"line 5", "2 minutes"},
		},
		"NegativeDuration": {
			reason:   "a negative duration is refused",
			file:     "negative_duration.yaml",
			contains: []string{"line 5", "negative"},
		},
		"DuplicateNames": {
			reason:   "a source or Envoy name used twice is refused, naming both lists",
			file:     "duplicate_names.yaml",
			contains: []string{`desired[1].name "frontend-tls" is used twice`, `envoys[1].name "edge-1" is used twice`},
		},
		"DanglingReferences": {
			reason: "every reference to a desired source that does not exist is reported at once",
			file:   "dangling_refs.yaml",
			contains: []string{
				"envoys[0].endpoints[0]", "no-such-endpoint-source",
				"envoys[0].bindings[0]", "no-such-binding-source",
				"pairings[0].bundle", "no-such-bundle-source",
			},
		},
		"Empty": {
			reason:   "an empty file is an error, not an empty config",
			file:     "empty.yaml",
			contains: []string{"empty"},
		},
		"CommentsOnly": {
			reason:   "a file holding only comments is empty too",
			file:     "comments_only.yaml",
			contains: []string{"empty"},
		},
		"MultiDocument": {
			reason:   "a second YAML document would be silently ignored, so it is refused",
			file:     "multi_document.yaml",
			contains: []string{"more than one YAML document"},
		},
		"Missing": {
			reason:   "a missing file names the file",
			file:     "does-not-exist.yaml",
			contains: []string{"does-not-exist.yaml"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			_, err := Load(path)
			if err == nil {
				t.Fatalf("%s: Load(%s) succeeded, want an error", tc.reason, tc.file)
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%s: error %q does not contain %q", tc.reason, err, s)
				}
			}
		})
	}
}

func TestLoadSizeLimit(t *testing.T) {
	valid := []byte("desired:\n  - name: a\n    dir: /x\n")
	pad := func(n int) []byte {
		// A comment line of the right length keeps the file valid YAML at any size.
		b := append([]byte{}, valid...)
		b = append(b, '#')
		b = append(b, bytes.Repeat([]byte("x"), n-len(b)-1)...)
		b = append(b, '\n')
		return b
	}
	tests := map[string]struct {
		reason  string
		size    int
		wantErr bool
	}{
		"AtLimit":   {reason: "a file of exactly MaxFileBytes is read", size: MaxFileBytes},
		"OverLimit": {reason: "a file one byte over the limit is refused", size: MaxFileBytes + 1, wantErr: true},
		"FarOver":   {reason: "a huge file is refused without reading it all", size: 8 * MaxFileBytes, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "big.yaml")
			data := pad(tc.size)
			if len(data) != tc.size {
				t.Fatalf("test bug: built %d bytes, want %d", len(data), tc.size)
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("%s: Load succeeded", tc.reason)
				}
				if !strings.Contains(err.Error(), "larger than") {
					t.Errorf("%s: error %q does not say the file is too large", tc.reason, err)
				}
				return
			}
			if err != nil {
				t.Errorf("%s: %v", tc.reason, err)
			}
		})
	}
}

// TestValidate covers the rules that need no file of their own.
func TestValidate(t *testing.T) {
	tests := map[string]struct {
		reason   string
		yaml     string
		contains []string // empty: want no error
	}{
		"DirOrFilesRequired": {
			reason:   "a desired source must say where it is",
			yaml:     "desired: [{name: a}]",
			contains: []string{"desired[0]", "set dir"},
		},
		"DirAndFilesExclusive": {
			reason:   "dir and explicit files together are ambiguous",
			yaml:     "desired: [{name: a, dir: /x, cert_file: /x/tls.crt}]",
			contains: []string{"desired[0]", "exclusive"},
		},
		"MergedNeedsDir": {
			reason:   "merged layout is read from a directory",
			yaml:     "desired: [{name: a, cert_file: /x.crt, merged: {cert_suffix: .crt}}]",
			contains: []string{"merged needs dir"},
		},
		"MissingName": {
			reason:   "names are how findings refer to sources",
			yaml:     "desired: [{dir: /x}]",
			contains: []string{"desired[0].name is required"},
		},
		"EnvoyNeedsAdminOrEndpoints": {
			reason:   "an Envoy with nothing to observe is a mistake",
			yaml:     "envoys: [{name: e}]",
			contains: []string{"envoys[0]", "set admin"},
		},
		"AdminNotURL": {
			reason:   "admin must be an http(s) URL",
			yaml:     "envoys: [{name: e, admin: '127.0.0.1:9901'}]",
			contains: []string{"envoys[0].admin", "127.0.0.1:9901"},
		},
		"EndpointNotHostPort": {
			reason:   "a TLS endpoint must be host:port",
			yaml:     "envoys: [{name: e, endpoints: [{address: localhost}]}]",
			contains: []string{"envoys[0].endpoints[0].address", "host:port"},
		},
		"ClientCertIncomplete": {
			reason:   "a client certificate needs its key",
			yaml:     "envoys: [{name: e, endpoints: [{address: 'a:1', client_cert: {cert_file: /c}}]}]",
			contains: []string{"client_cert needs cert_file and key_file"},
		},
		"BindingNeedsPlace": {
			reason:   "a binding must say where Envoy holds the certificate",
			yaml:     "desired: [{name: a, dir: /x}]\nenvoys: [{name: e, admin: 'http://h:1', bindings: [{source: a}]}]",
			contains: []string{"envoys[0].bindings[0]", "secret"},
		},
		"CriticalLongerThanWarning": {
			reason:   "the critical expiry threshold must not be looser than the warning one",
			yaml:     "desired: [{name: a, dir: /x}]\npolicy: {expiring_warning: 24h, expiring_critical: 48h}",
			contains: []string{"policy.expiring_critical"},
		},
		"NegativeCounts": {
			reason:   "negative limits make no sense",
			yaml:     "desired: [{name: a, dir: /x}]\npolicy: {max_bundle_cas: -1}",
			contains: []string{"must not be negative"},
		},
		"DurationNotString": {
			reason:   "a duration written as a YAML map is refused with its line",
			yaml:     "desired: [{name: a, dir: /x}]\npolicy:\n  grace: {seconds: 5}",
			contains: []string{"line 3"},
		},
		"AllErrorsAtOnce": {
			reason:   "validation reports every problem, not just the first",
			yaml:     "desired: [{name: a}, {name: a, dir: /x}]\nenvoys: [{name: e}]",
			contains: []string{"desired[0]", "desired[1]", "envoys[0]"},
		},
		"Valid": {
			reason: "a plain setup passes",
			yaml:   "desired: [{name: a, dir: /x}]\nenvoys: [{name: e, admin: 'https://h:9901', endpoints: [{address: '[::1]:8443'}]}]",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if len(tc.contains) == 0 {
				if err != nil {
					t.Fatalf("%s: unexpected error: %v", tc.reason, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s: Parse succeeded, want an error", tc.reason)
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%s: error %q does not contain %q", tc.reason, err, s)
				}
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"good.yaml", "dangling_refs.yaml", "unknown_field.yaml", "multi_document.yaml", "three_errors.yaml", "bad_duration.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err == nil && c == nil {
			t.Fatal("Parse returned neither a config nor an error")
		}
		if err == nil {
			if verr := c.Validate(); verr != nil {
				t.Fatalf("Parse accepted a config that does not validate: %v", verr)
			}
		}
	})
}
