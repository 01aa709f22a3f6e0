package testbed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFirstServiceIP(t *testing.T) {
	cases := map[string]struct {
		reason  string
		cidr    string
		want    string
		wantErr bool
	}{
		"Default":   {reason: "the kubernetes Service takes the first address", cidr: "10.96.0.0/16", want: "10.96.0.1"},
		"Unmasked":  {reason: "host bits in the range are ignored, as the API server does", cidr: "10.0.5.7/24", want: "10.0.5.1"},
		"IPv6":      {reason: "the testbed only builds IPv4 serving certificates", cidr: "fd00::/108", wantErr: true},
		"TooSmall":  {reason: "a /31 leaves no service address", cidr: "10.0.0.0/31", wantErr: true},
		"NotARange": {reason: "garbage is rejected with context", cidr: "ten", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := firstServiceIP(tc.cidr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: firstServiceIP(%q) error = %v, wantErr %v", tc.reason, tc.cidr, err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.cidr) {
				t.Errorf("%s: error %q does not name the range", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: firstServiceIP(%q) (-want +got):\n%s", tc.reason, tc.cidr, diff)
			}
		})
	}
}

func TestFindBinDir(t *testing.T) {
	full := t.TempDir()
	for _, n := range binaryNames {
		if err := os.WriteFile(filepath.Join(full, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	partial := t.TempDir()
	if err := os.WriteFile(filepath.Join(partial, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := t.TempDir()
	for _, n := range binaryNames {
		if err := os.WriteFile(filepath.Join(notExec, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]struct {
		reason  string
		dir     string
		wantErr string
	}{
		"Complete":      {reason: "all four binaries present", dir: full},
		"Missing":       {reason: "a missing binary names the build script", dir: partial, wantErr: "scripts/build-kube.sh"},
		"NotExecutable": {reason: "a non-executable file is refused", dir: notExec, wantErr: "not an executable"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := findBinDir(tc.dir)
			if tc.wantErr == "" {
				if err != nil || got != tc.dir {
					t.Fatalf("%s: findBinDir = %q, %v; want %q, nil", tc.reason, got, err, tc.dir)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("%s: findBinDir error = %v; want one containing %q", tc.reason, err, tc.wantErr)
			}
		})
	}
}
