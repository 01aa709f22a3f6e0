package envoytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseVersion(t *testing.T) {
	cases := []struct {
		name    string
		out     string
		want    string
		wantErr bool
	}{
		{name: "Release140", out: "\nenvoy  version: 9e5580933739775e8bce696a57a2e1bc99368f23/1.40.0/Clean/RELEASE/BoringSSL\n\n", want: "1.40.0"},
		{name: "Release1362", out: "envoy  version: 0123abc/1.36.2/Clean/RELEASE/BoringSSL", want: "1.36.2"},
		{name: "DevBuild", out: "envoy  version: 0123abc/1.41.0-dev/Modified/DEBUG/BoringSSL", want: "1.41.0"},
		{name: "NotEnvoy", out: "bash: envoy: command not found", wantErr: true},
		{name: "Empty", out: "", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseVersion(tc.out)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseVersion(%q) err = %v, want error: %v", tc.out, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseVersion(%q) = %q, want %q", tc.out, got, tc.want)
			}
		})
	}
}

func TestRedacted(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want string
	}{
		{name: "NoKey", in: "a\nb", want: "a\nb"},
		{
			name: "PEMBlock",
			in:   "before\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\nAwEHoUQ=\n-----END EC PRIVATE KEY-----\nafter",
			want: "before\n" + strings.Repeat("[line redacted: private key material]\n", 4) + "after",
		},
		{
			name: "EscapedOnOneLine",
			in:   `error in {"inline_string":"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----"}` + "\nnext",
			want: "[line redacted: private key material]\nnext",
		},
		{
			name: "UnterminatedBlock",
			in:   "-----BEGIN RSA PRIVATE KEY-----\nMIIE\nmore",
			want: strings.Repeat("[line redacted: private key material]\n", 2) + "[line redacted: private key material]",
		},
		{name: "CertificateKept", in: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", want: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Redacted(tc.in)); diff != "" {
				t.Errorf("Redacted() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseStats(t *testing.T) {
	in := "sds.server_cert.key_rotation_failed: 2\n" +
		"listener.127.0.0.1_0.ssl.certificate.server_cert.expiration_unix_time_seconds: 1797912637\n" +
		"cluster_manager.cds.update_duration: P0(nan,0) P25(nan,0)\n" +
		"server.version: 11489287\n" +
		"weird line\n: 3\n"
	want := map[string]uint64{
		"sds.server_cert.key_rotation_failed":                                           2,
		"listener.127.0.0.1_0.ssl.certificate.server_cert.expiration_unix_time_seconds": 1797912637,
		"server.version": 11489287,
	}
	if diff := cmp.Diff(want, parseStats(in)); diff != "" {
		t.Errorf("parseStats mismatch (-want +got):\n%s", diff)
	}
}

func TestLogTailDropsStartupListing(t *testing.T) {
	log := "[2026-11-22 04:08:49.726][23725][info][main] [source/server/server.cc:465] statically linked extensions:\n" +
		"[2026-11-22 04:08:49.726][23725][info][main] [source/server/server.cc:467]   envoy.http.cache_v2: a, b\n" +
		"[2026-11-22 04:08:49.764][23725][info][main] [source/server/server.cc:1098] starting main dispatch loop\n"
	got := logTail(log, 10)
	if strings.Contains(got, "cache_v2") || !strings.Contains(got, "starting main dispatch loop") {
		t.Errorf("logTail kept the listing or lost the message:\n%s", got)
	}
}

func TestResolveBinaryErrors(t *testing.T) {
	dir := t.TempDir()
	notEnvoy := filepath.Join(dir, "envoy")
	if err := os.WriteFile(notEnvoy, []byte("#!/bin/sh\necho not envoy\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "ExplicitMissing", env: map[string]string{EnvBin: filepath.Join(dir, "nope")}, wantErr: "nope --version"},
		{name: "ExplicitNotEnvoy", env: map[string]string{EnvBin: notEnvoy}, wantErr: "no version"},
		{name: "FromPathMissing", env: map[string]string{EnvBin: "", EnvFromPath: "1", "PATH": dir + "/empty"}, wantErr: "no envoy on PATH"},
		{name: "BadVersion", env: map[string]string{EnvBin: "", EnvFromPath: "", EnvVersion: "../../etc"}, wantErr: "is not a version"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := resolveBinary()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("resolveBinary() err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestResolveBinaryVersion checks that the binary under test is the version asked for, so a
// stale cache can never make CI test a different Envoy than it claims.
func TestResolveBinaryVersion(t *testing.T) {
	want := os.Getenv(EnvVersion)
	if want == "" {
		want = DefaultVersion
	}
	b := ResolveBinary(t)
	if os.Getenv(EnvBin) == "" && os.Getenv(EnvFromPath) != "1" && b.Version != want {
		t.Errorf("ResolveBinary() version %s, want %s", b.Version, want)
	}
	if fi, err := os.Stat(b.Path); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("ResolveBinary() path %s is not an executable file: %v", b.Path, err)
	}
}
