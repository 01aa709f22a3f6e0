package cdbin

import (
	"context"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	ctx := context.Background()
	if r, err := Run(ctx, "/bin/sh", nil, "-c", "echo out; echo err >&2; exit 3"); err != nil || r.Code != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("exit 3: got %+v, %v; want code 3 with both streams", r, err)
	}
	if _, err := Run(ctx, "/nonexistent/certdrift", nil); err == nil {
		t.Errorf("a binary that does not exist: want an error, not a result")
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := Run(short, "/bin/sleep", nil, "5"); err == nil {
		t.Errorf("a run cut by its deadline: want an error, not an exit code")
	}
}

func TestLeaksKey(t *testing.T) {
	key := []byte("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBody\n-----END EC PRIVATE KEY-----\n")
	cases := map[string]struct {
		out  string
		want bool
	}{
		"Clean":      {"STALE_SERVED web", false},
		"PEMHeader":  {"x -----BEGIN PRIVATE KEY----- y", true},
		"BodyLine":   {"evidence: MHcCAQEEIBody", true},
		"OtherLines": {"-----END EC", false},
	}
	for name, tc := range cases {
		if got := LeaksKey(tc.out, [][]byte{key}); got != tc.want {
			t.Errorf("%s: LeaksKey(%q) = %v, want %v", name, tc.out, got, tc.want)
		}
	}
}
