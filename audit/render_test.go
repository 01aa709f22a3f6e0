package audit

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/render")

const (
	fpOld = "0f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0"
	fpNew = "aabbccddeeff00112233445566778899aabbccddeeff00112233445566778899"
)

// sampleReport is hand-built so that the renderers are tested without depending on the checks:
// two Envoys, a source-only finding, an inferred binding, and one finding of every severity.
func sampleReport() Report {
	at := time.Date(2026, 11, 22, 4, 1, 2, 0, time.UTC)
	since := at.Add(-10 * time.Minute)
	return Report{
		GeneratedAt: at,
		Bindings: []Binding{
			{Envoy: "edge-1", Source: "frontend-tls", Secret: "frontend", Endpoint: "10.0.0.1:8443", SNIs: []string{"shop.example.com"}, Origin: "config", State: StateConverged},
			{Envoy: "edge-2", Source: "frontend-tls", Secret: "frontend", Endpoint: "10.0.0.2:8443", SNIs: []string{"shop.example.com"}, Origin: "sds-name", State: StateStale},
			{Envoy: "edge-2", Source: "api-tls", File: "/etc/envoy/certs/api.crt", Origin: "inferred", State: StateStale},
			{Envoy: "edge-1", Source: "internal-ca", Item: "mesh", File: "/etc/envoy/ca/mesh.crt", Origin: "path", State: StateUnknown},
		},
		Findings: []Finding{
			{
				Code: Expiring, Severity: Warning,
				Subject:  Subject{Envoy: "edge-1", Source: "frontend-tls", Secret: "frontend"},
				Message:  "loaded certificate " + fpNew + " expires in 20 days",
				Advice:   "renew the certificate before 2026-12-12",
				Evidence: map[string]string{"fingerprint_sha256": fpNew, "not_after": "2026-12-12T00:00:00Z"},
			},
			{
				Code: StaleLoaded, Severity: Critical,
				Subject: Subject{Envoy: "edge-1", Source: "frontend-tls", Secret: "frontend"},
				Message: "Envoy holds " + fpOld + ", desired is " + fpNew,
				Advice:  "the TLS context is static: restart Envoy or move it to SDS",
				Evidence: map[string]string{
					"desired_fingerprint_sha256": fpNew, "loaded_fingerprint_sha256": fpOld,
					"desired_serial": "1a2b", "loaded_serial": "0f",
				},
				Since: &since,
			},
			{
				Code: Unreachable, Severity: Warning,
				Subject: Subject{Envoy: "edge-2", Endpoint: "http://10.0.0.2:9901"},
				Message: "admin endpoint did not answer: connection refused",
				Advice:  "check the admin address and that certdrift may reach it",
			},
			{
				Code: HostnameMismatch, Severity: Critical,
				Subject:  Subject{Envoy: "edge-2", Source: "api-tls", Endpoint: "10.0.0.2:8443", SNI: "api.example.com"},
				Message:  "served leaf does not cover api.example.com",
				Inferred: true,
			},
			{
				Code: CABundleHygiene, Severity: Info,
				Subject: Subject{Source: "internal-ca", Item: "mesh"},
				Message: "bundle holds 1 expired CA",
				Advice:  "drop the expired CA from the bundle",
			},
		},
		Summary: Summary{
			DesiredSources: 3, Envoys: 2, Handshakes: 6, Bindings: 4,
			Findings: map[string]int{"critical": 2, "warning": 2, "info": 1},
			Coverage: Coverage{BindingsJudged: 3, Bindings: 4, HandshakesJudged: 5, Handshakes: 6, Gaps: 1},
		},
	}
}

func cleanReport() Report {
	return Report{
		GeneratedAt: time.Date(2026, 11, 22, 4, 1, 2, 0, time.UTC),
		Bindings:    []Binding{{Envoy: "edge-1", Source: "frontend-tls", Secret: "frontend", Origin: "config", State: StateConverged}},
		Summary: Summary{DesiredSources: 1, Envoys: 1, Handshakes: 1, Bindings: 1,
			Coverage: Coverage{BindingsJudged: 1, Bindings: 1, HandshakesJudged: 1, Handshakes: 1, Complete: true}},
	}
}

// uncoveredReport found nothing wrong, but could not look: it must not read as clean.
func uncoveredReport() Report {
	return Report{
		GeneratedAt: time.Date(2026, 11, 22, 4, 1, 2, 0, time.UTC),
		Bindings:    []Binding{{Envoy: "edge-1", Source: "frontend-tls", File: "/etc/envoy/tls.crt", Origin: "config", State: StateUnknown, Reason: "the Envoy's admin shows no certificate for it"}},
		Summary: Summary{DesiredSources: 1, Envoys: 1, Handshakes: 1, Bindings: 1,
			Coverage: Coverage{Bindings: 1, Handshakes: 1}},
	}
}

func TestRenderGolden(t *testing.T) {
	tests := map[string]struct {
		reason string
		report Report
		render func(*bytes.Buffer, Report) error
		golden string
	}{
		"TableWithFindings": {
			reason: "findings are grouped by Envoy, worst first, with a summary",
			report: sampleReport(),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
			golden: "table.golden",
		},
		"TableClean": {
			reason: "a clean report still says what it covered",
			report: cleanReport(),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
			golden: "table_clean.golden",
		},
		"TableNotJudged": {
			reason: "no finding, but a binding and a handshake not judged: the summary says it is not clean",
			report: uncoveredReport(),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
			golden: "table_not_judged.golden",
		},
		"JSONWithFindings": {
			reason: "JSON keeps the json tag names and full fingerprints",
			report: sampleReport(),
			render: func(b *bytes.Buffer, r Report) error { return RenderJSON(b, r) },
			golden: "report.json.golden",
		},
		"JSONClean": {
			reason: "a clean report has empty lists, not null",
			report: cleanReport(),
			render: func(b *bytes.Buffer, r Report) error { return RenderJSON(b, r) },
			golden: "report_clean.json.golden",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.render(&b, tc.report); err != nil {
				t.Fatalf("%s: render: %v", tc.reason, err)
			}
			path := filepath.Join("testdata", "render", tc.golden)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden %s (run go test ./audit -run TestRenderGolden -update to create it): %v", path, err)
			}
			if diff := cmp.Diff(string(want), b.String()); diff != "" {
				t.Errorf("%s\n%s: -golden +got:\n%s", tc.reason, path, diff)
			}
		})
	}
}

func TestRenderTableProperties(t *testing.T) {
	var b bytes.Buffer
	if err := RenderTable(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")

	if strings.Contains(out, fpOld) || strings.Contains(out, fpNew) {
		t.Errorf("table shows a full 64-hex fingerprint; want it cut to %d chars:\n%s", ShortFingerprintLen, out)
	}
	if !strings.Contains(out, fpOld[:ShortFingerprintLen]) {
		t.Errorf("table lost the short fingerprint %s:\n%s", fpOld[:ShortFingerprintLen], out)
	}
	if got, want := lines[len(lines)-1], "5 findings (2 critical, 2 warning, 1 info) across 2 envoys; judged 3 of 4 bindings, 5 of 6 handshakes; coverage incomplete"; got != want {
		t.Errorf("summary line = %q, want %q", got, want)
	}
	// Every binding is listed with its state, converged ones included.
	for _, want := range []string{"edge-1  frontend-tls      CONVERGED", "edge-2  frontend-tls      STALE", "edge-1  internal-ca/mesh  UNKNOWN"} {
		if !strings.Contains(out, want) {
			t.Errorf("binding list lacks %q:\n%s", want, out)
		}
	}
	// Inside each group, severities never increase going down.
	rank := map[string]int{"CRITICAL": 3, "WARNING": 2, "INFO": 1}
	prev := 4
	for _, l := range lines {
		if strings.HasPrefix(l, "bindings") {
			break // the binding list follows the findings
		}
		if !strings.HasPrefix(l, "  ") || strings.HasPrefix(l, "      ") {
			if !strings.HasPrefix(l, "  ") {
				prev = 4 // a group header or blank line starts a new group
			}
			continue
		}
		sev := strings.Fields(l)[0]
		if rank[sev] == 0 {
			t.Fatalf("finding line %q does not start with a severity", l)
		}
		if rank[sev] > prev {
			t.Errorf("line %q is worse than the line above it", l)
		}
		prev = rank[sev]
	}
}

func TestRenderTableHostileText(t *testing.T) {
	r := Report{Findings: []Finding{{
		Code: ParseError, Severity: Warning,
		Subject: Subject{Source: "evil\x1b[31mred"},
		Message: "bad PEM\nCRITICAL FAKE line\u202e",
		Advice:  "fix\rit",
	}}}
	var b bytes.Buffer
	if err := RenderTable(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"\x1b", "\r", "\u202e", "\nCRITICAL FAKE"} {
		if strings.Contains(out, bad) {
			t.Errorf("table contains %q from hostile input:\n%q", bad, out)
		}
	}
}

func TestRenderJSONRoundTrip(t *testing.T) {
	var b bytes.Buffer
	in := sampleReport()
	if err := RenderJSON(&b, in); err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(b.Bytes(), &generic); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	for _, k := range []string{"generated_at", "bindings", "findings", "summary"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("top-level field %q missing", k)
		}
	}
	var out Report
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatalf("decode into Report: %v", err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("JSON round trip changed the report: -in +out:\n%s", diff)
	}
}

// Many findings of one code about one subject fold into one line after the first few; other
// findings are untouched, and the JSON report keeps them all.
func TestRenderTableCollapsesRepeats(t *testing.T) {
	var r Report
	s := Subject{Envoy: "e", Endpoint: "127.0.0.1:8443", SNI: "a.example.com"}
	for i := range 50 {
		r.Findings = append(r.Findings, Finding{Code: Expired, Severity: Critical, Subject: s,
			Message: fmt.Sprintf("served chain certificate #%d expired", i), Advice: "renew"})
	}
	r.Findings = append(r.Findings, Finding{Code: Expired, Severity: Critical, Subject: Subject{Envoy: "e", Endpoint: "other:443"}, Message: "other expired"})
	var b strings.Builder
	if err := RenderTable(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if n := strings.Count(out, "served chain certificate #"); n != collapseAfter {
		t.Errorf("%d chain findings shown, want %d", n, collapseAfter)
	}
	if !strings.Contains(out, fmt.Sprintf("… and %d more like these", 50-collapseAfter)) || !strings.Contains(out, "other expired") {
		t.Errorf("want the rest folded into one line and the other finding kept:\n%s", out)
	}
	b.Reset()
	if err := RenderJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "served chain certificate #"); n != 50 {
		t.Errorf("JSON lists %d chain findings, want all 50", n)
	}
}
