// Package e2e proves certdrift end to end: the real certdrift binary audits real Envoy processes
// (from test/envoytest) serving certificates from kubelet-layout directories (test/atomicdir)
// that the tests rotate. Run it against each Envoy version with CERTDRIFT_ENVOY_VERSION.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/test/cdbin"
)

var certdriftBin string

func TestMain(m *testing.M) { cdbin.Main(m, &certdriftBin) }

// outputs collects everything certdrift printed in this package, for the key-material check.
var (
	outputsMu sync.Mutex
	outputs   bytes.Buffer
)

// run executes certdrift and returns its exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := cdbin.Run(ctx, certdriftBin, os.Environ(), args...)
	outputsMu.Lock()
	outputs.WriteString(r.Stdout)
	outputs.WriteString(r.Stderr)
	outputsMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return r.Code, r.Stdout, r.Stderr
}

// auditJSON runs `certdrift audit -o json` on a config and decodes the report.
func auditJSON(t *testing.T, configPath string) (int, audit.Report) {
	t.Helper()
	code, out, errOut := run(t, "audit", "--config", configPath, "-o", "json")
	var r audit.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("certdrift audit exit %d, output is not a JSON report: %v\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	return code, r
}

// waitFor polls cond until it is true or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
}

func codes(r audit.Report) map[audit.Code][]audit.Finding {
	m := map[audit.Code][]audit.Finding{}
	for _, f := range r.Findings {
		m[f.Code] = append(m[f.Code], f)
	}
	return m
}

func describe(r audit.Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "\n  %s %s %s", f.Severity, f.Code, f.Message)
	}
	for _, bd := range r.Bindings {
		fmt.Fprintf(&b, "\n  binding %s %s/%s %s", bd.Envoy, bd.Source, bd.Item, bd.State)
	}
	return b.String()
}

// keyMaterial matches PEM private-key markers.
var keyMarker = regexp.MustCompile(`PRIVATE KEY`)

// TestZZNoKeyMaterialInOutput runs last (tests run in source order, and this file sorts first but
// the name keeps it obvious): nothing certdrift printed in any test may contain private key
// material. Key bodies are checked by every test through checkNoKeys as well.
func checkNoKeys(t *testing.T, keyPEMs ...[]byte) {
	t.Helper()
	outputsMu.Lock()
	all := outputs.String()
	outputsMu.Unlock()
	if keyMarker.MatchString(all) {
		t.Errorf("certdrift output contains a PEM private key marker")
	}
	for _, k := range keyPEMs {
		for _, line := range strings.Split(string(k), "\n") {
			line = strings.TrimSpace(line)
			if len(line) >= 40 && !strings.HasPrefix(line, "-----") && strings.Contains(all, line) {
				t.Errorf("certdrift output contains a line of private key material")
				return
			}
		}
	}
}
