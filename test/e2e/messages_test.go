package e2e

import (
	"net"
	"strings"
	"testing"

	"github.com/certdrift/certdrift/audit"
)

// TestErrorsSaidOnce: the JSON report's messages come from Go errors that wrap errors saying the
// same thing ("dial X: dial tcp X: …", `GET /certs: request: Get "/certs": …`); each is said once,
// as the table says it, with the cause kept.
func TestErrorsSaidOnce(t *testing.T) {
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	admin, endpoint := closed(), closed()
	cfg := writeConfig(t, "envoys:\n  - name: gone\n    admin: http://"+admin+"\n    endpoints:\n      - address: "+endpoint+"\n        sni: [www.example.com]\n")
	_, r := auditJSON(t, cfg)
	n := 0
	for _, f := range r.Findings {
		if f.Code != audit.Unreachable {
			continue
		}
		n++
		t.Logf("OBSERVED %s: %s", f.Code, f.Message)
		for _, bad := range []string{"dial " + endpoint + ": dial", "request: Get", `Get "/`} {
			if strings.Contains(f.Message, bad) {
				t.Errorf("message says %q: %s", bad, f.Message)
			}
		}
		if !strings.Contains(f.Message, "connection refused") {
			t.Errorf("message lost its cause: %s", f.Message)
		}
	}
	if n != 2 {
		t.Errorf("%d UNREACHABLE findings, want 2 (admin and endpoint):%s", n, describe(r))
	}
}
