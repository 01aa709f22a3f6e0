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
	"unicode/utf8"

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

// staleReport is the demo's second audit (test/demo): a static-TLS Envoy that kept the old
// certificate after a kubelet-style rotation, next to an SDS Envoy that reloaded. Messages are
// the checks' own text; paths are as long as a temporary directory makes them.
func staleReport() Report {
	at := time.Date(2026, 11, 22, 4, 1, 2, 0, time.UTC)
	changed := at.Add(-3 * time.Second)
	vol := "/tmp/certdrift-demo-3805929455/3892937077/secret-volume/tls.crt"
	return Report{
		GeneratedAt: at,
		Bindings: []Binding{
			{Envoy: "edge-sds", Source: "web", Secret: "web_cert", File: vol, Origin: OriginPath, State: StateConverged},
			{Envoy: "edge-static", Source: "web", File: vol, Origin: OriginPath, State: StateStale},
		},
		Findings: []Finding{
			{
				Code: StaleLoaded, Severity: Warning, Since: &changed,
				Subject: Subject{Envoy: "edge-static", Source: "web", File: vol},
				Message: "Envoy edge-static holds serial 17e1d99de594a188ad17ad59cb58efe1 for web, but the desired certificate (serial 5d8b2247b6b2cce4880e842f330b43b1) changed 3s ago",
				Advice:  "this Envoy did not reload: use file-based or xDS SDS instead of a static TLS context, or restart it",
				Evidence: map[string]string{"desired_fingerprint_sha256": fpNew, "desired_serial": "5d8b2247b6b2cce4880e842f330b43b1",
					"loaded_serial": "17e1d99de594a188ad17ad59cb58efe1", "loaded_from": "/certs"},
			},
			{
				Code: StaleServed, Severity: Warning, Since: &changed,
				Subject: Subject{Envoy: "edge-static", Source: "web", Endpoint: "127.0.0.1:38571", SNI: "www.example.com", File: vol},
				Message: "127.0.0.1:38571 (SNI \"www.example.com\") serves sha256:" + fpOld[:16] + ", not the desired certificate of web (sha256:" + fpNew[:16] + "), which changed 3s ago",
				Advice:  "this Envoy did not reload; restart it, or move it to file-based or xDS SDS so it reloads by itself",
				Evidence: map[string]string{"desired_fingerprint_sha256": fpNew, "served_fingerprint_sha256": fpOld,
					"desired_serial": "5d8b2247b6b2cce4880e842f330b43b1", "served_serial": "17e1d99de594a188ad17ad59cb58efe1"},
			},
		},
		Summary: Summary{DesiredSources: 1, Envoys: 2, Handshakes: 2, Bindings: 2,
			Findings: map[string]int{"warning": 2},
			Coverage: Coverage{BindingsJudged: 2, Bindings: 2, HandshakesJudged: 2, Handshakes: 2, Complete: true}},
	}
}

// validityReport holds the expiry, trust and hostname families, one finding each, and a
// lingering context; the names of certificates are the checks' (certName: first DNS name).
func validityReport() Report {
	at := time.Date(2026, 11, 22, 4, 1, 2, 0, time.UTC)
	return Report{
		GeneratedAt: at,
		Findings: []Finding{
			{Code: Expired, Severity: Critical, Subject: Subject{Source: "legacy", File: "/etc/certs/legacy/tls.crt"},
				Message:  `desired certificate "legacy.example.com" expired 3d ago`,
				Advice:   "issue a new certificate and make sure every Envoy loads it",
				Evidence: map[string]string{"view": "desired", "serial": "0a", "fingerprint_sha256": fpOld, "not_after": "2026-11-19T00:00:00Z"}},
			{Code: Expiring, Severity: Warning, Subject: Subject{Envoy: "edge-1", Source: "web", Secret: "web_cert"},
				Message:  `loaded certificate "www.example.com" expires in 13d`,
				Advice:   "renew it; if it was already renewed, look for STALE findings on the Envoys that still hold this one",
				Evidence: map[string]string{"view": "loaded", "serial": "5d8b2247b6b2cce4880e842f330b43b1", "not_after": "2026-12-05T00:00:00Z"}},
			{Code: CABundleGap, Severity: Critical, Subject: Subject{Source: "web", File: "/etc/certs/web/ca.crt"},
				Message:  `the CA bundle /etc/certs/web/ca.crt beside it does not verify certificate "www.example.com" (issuer "ca-2")`,
				Advice:   "add the new issuer to the bundle before rolling out leaves it signed (bundle [newCA, oldCA] during a CA rotation)",
				Evidence: map[string]string{"leaf_fingerprint": fpNew, "leaf_issuer": "CN=ca-2", "bundle_size": "1"}},
			{Code: HostnameMismatch, Severity: Critical, Subject: Subject{Envoy: "edge-1", Source: "api", Endpoint: "10.0.0.1:8443", SNI: "api.example.com"},
				Message:  `10.0.0.1:8443 served "www.example.com" for SNI "api.example.com", which it does not cover`,
				Advice:   "check the listener's server_names and which certificate its filter chain uses",
				Evidence: map[string]string{"served_fingerprint_sha256": fpNew, "served_dns_names": "www.example.com"}},
			{Code: LingeringContext, Severity: Info, Subject: Subject{Envoy: "edge-1", Source: "web", Secret: "web_cert"},
				Message:  "Envoy edge-1 still holds serial 17e1d99de594a188ad17ad59cb58efe1 for web beside serial 5d8b2247b6b2cce4880e842f330b43b1 (a draining listener or a replaced context)",
				Evidence: map[string]string{"lingering_serial": "17e1d99de594a188ad17ad59cb58efe1"}},
		},
		Summary: Summary{DesiredSources: 3, Envoys: 1, Handshakes: 1, Bindings: 0,
			Findings: map[string]int{"critical": 3, "warning": 1, "info": 1},
			Coverage: Coverage{HandshakesJudged: 1, Handshakes: 1, Complete: true}},
	}
}

// kubeReport is Kubernetes mode: Envoys named namespace/pod, Secrets namespace/name, SDS names
// as Istio and Envoy Gateway write them, a trust binding, and a binding not judged.
func kubeReport() Report {
	at := time.Date(2026, 11, 22, 4, 1, 2, 0, time.UTC)
	return Report{
		GeneratedAt: at,
		Bindings: []Binding{
			{Envoy: "web/envoy-5699ff9cf6-qkbk8", Workload: "Deployment/envoy", Source: "web/web-tls", File: "/etc/envoy/tls/tls.crt", Origin: OriginConfig, State: StateConverged},
			{Envoy: "web/envoy-5699ff9cf6-x2v7p", Workload: "Deployment/envoy", Source: "web/web-tls", File: "/etc/envoy/tls/tls.crt", Origin: OriginPath, State: StateStale},
			{Envoy: "envoy-gateway-system/envoy-default-eg-e41e7b31-7c4d9b8f6-abcde", Workload: "Deployment/envoy-default-eg-e41e7b31", Source: "default/eg-https", Secret: "default/eg-https", Origin: OriginSDSName, State: StateConverged},
			{Envoy: "istio-system/istio-ingressgateway-6d8f9-zx1", Workload: "Deployment/istio-ingressgateway", Source: "istio-system/istio-ca-root-cert", Secret: "ROOTCA", Origin: OriginSDSName, Trust: true, State: StateUnknown, Reason: "config_dump holds no validation context for it"},
		},
		Findings: []Finding{
			{Code: StaleLoaded, Severity: Warning, Subject: Subject{Envoy: "web/envoy-5699ff9cf6-x2v7p", Workload: "Deployment/envoy", Source: "web/web-tls", File: "/etc/envoy/tls/tls.crt"},
				Message:  "Envoy web/envoy-5699ff9cf6-x2v7p holds serial 17e1d99de594a188ad17ad59cb58efe1 for web/web-tls, but the desired certificate (serial 5d8b2247b6b2cce4880e842f330b43b1) changed 4m ago",
				Advice:   "this Envoy did not reload: use file-based or xDS SDS instead of a static TLS context, or restart it",
				Evidence: map[string]string{"desired_fingerprint_sha256": fpNew, "loaded_serial": "17e1d99de594a188ad17ad59cb58efe1"}},
		},
		Summary: Summary{DesiredSources: 3, Envoys: 4, Handshakes: 4, Bindings: 4,
			Findings: map[string]int{"warning": 1},
			Coverage: Coverage{BindingsJudged: 3, Bindings: 4, HandshakesJudged: 4, Handshakes: 4}},
	}
}

// errorsReport is what could not be read: unreachable admin and listener (with the error text Go
// wraps twice), a source missing, an admin that answered something that is not JSON.
func errorsReport() Report {
	at := time.Date(2026, 11, 22, 4, 1, 2, 0, time.UTC)
	return Report{
		GeneratedAt: at,
		Findings: []Finding{
			{Code: Unreachable, Severity: Warning, Subject: Subject{Envoy: "edge", Endpoint: "127.0.0.1:2", SNI: "www.example.com"},
				Message:  `TLS handshake with 127.0.0.1:2 (SNI "www.example.com") failed: dial 127.0.0.1:2: dial tcp 127.0.0.1:2: connect: connection refused`,
				Advice:   "the served view of this endpoint was not checked; check the address and that the listener is up",
				Evidence: map[string]string{"reason": "refused"}},
			{Code: Unreachable, Severity: Warning, Subject: Subject{Envoy: "edge", Endpoint: "http://127.0.0.1:1"},
				Message: `Envoy admin http://127.0.0.1:1 did not answer: GET /certs: request: Get "/certs": dial tcp 127.0.0.1:1: connect: connection refused`,
				Advice:  "the loaded view of this Envoy was not checked; check the admin address and that Envoy is running"},
			{Code: ParseError, Severity: Warning, Subject: Subject{Envoy: "edge-2", Endpoint: "http://127.0.0.1:9902"},
				Message: `Envoy admin http://127.0.0.1:9902: GET /certs: not JSON: body starts with "<html><body>Welcome to nginx" (Content-Type "text/html")`,
				Advice:  "point the admin address at Envoy's admin listener"},
			{Code: SourceMissing, Severity: Warning, Subject: Subject{Source: "web", File: "/nonexistent/tls"},
				Message:  `desired source "web" could not be read: source directory /nonexistent/tls: no such file or directory; nothing about it was judged`,
				Advice:   "fix the path or name in the configuration, or create it; if a filter (--secret-selector, --secret-type, --exclude-namespace) leaves it out, widen the filter",
				Evidence: map[string]string{"reason": "not_found"}},
		},
		Summary: Summary{DesiredSources: 1, Envoys: 2, Handshakes: 1,
			Findings: map[string]int{"warning": 4},
			Coverage: Coverage{Handshakes: 1, Gaps: 4}},
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
		"TableStale": {
			reason: "the demo's stale Envoy: labelled fingerprints (desired beside loaded and served), short serials and paths",
			report: staleReport(),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
			golden: "table_stale.golden",
		},
		"TableValidity": {
			reason: "expiry, trust bundle, hostname and lingering findings, certificates named by their DNS name",
			report: validityReport(),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
			golden: "table_validity.golden",
		},
		"TableKubernetes": {
			reason: "Kubernetes bindings: pods, Secrets, SDS names, a trust binding not judged (a NOTE column)",
			report: kubeReport(),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
			golden: "table_kube.golden",
		},
		"TableErrors": {
			reason: "what could not be read, with Go's doubled error prefixes said once",
			report: errorsReport(),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
			golden: "table_errors.golden",
		},
		"JSONStale": {
			reason: "the JSON of the stale report keeps full fingerprints, serials and paths",
			report: staleReport(),
			render: func(b *bytes.Buffer, r Report) error { return RenderJSON(b, r) },
			golden: "report_stale.json.golden",
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
	for name, r := range map[string]Report{"Sample": sampleReport(), "Stale": staleReport(), "Validity": validityReport(),
		"Kubernetes": kubeReport(), "Errors": errorsReport()} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := RenderTable(&b, r); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if !strings.HasPrefix(lines[0], "certdrift audit at ") {
				t.Errorf("first line %q: want the report's header", lines[0])
			}
			if fingerprintRE.MatchString(out) {
				t.Errorf("table shows a full 64-hex fingerprint; want sha256: and %d hex digits:\n%s", ShortFingerprintLen, out)
			}
			// Every line fits a 100-column terminal, but the summary's, which stay whole for
			// grep and fit 120.
			summary := len(lines) - 1
			if strings.HasPrefix(lines[summary], "coverage incomplete") {
				summary--
			}
			for i, l := range lines {
				limit := TableWidth
				if i >= summary {
					limit = 120
				}
				if n := utf8.RuneCountInString(l); n > limit {
					t.Errorf("line of %d columns (> %d): %q", n, limit, l)
				}
			}
			for _, bad := range []string{"dial tcp 127.0.0.1:2: dial", "request: Get", "(s)"} {
				if strings.Contains(out, bad) {
					t.Errorf("table says %q:\n%s", bad, out)
				}
			}
			// Inside each group, severities never increase going down.
			rank := map[string]int{"CRITICAL": 3, "WARNING": 2, "INFO": 1}
			prev := 4
			for _, l := range lines {
				if l == "BINDINGS" {
					break
				}
				if !strings.HasPrefix(l, "  ") {
					prev = 4 // a group header or blank line starts a new group
					continue
				}
				if strings.HasPrefix(l, "    ") {
					continue // message, evidence, advice
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
		})
	}

	var b bytes.Buffer
	if err := RenderTable(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if !strings.Contains(out, "sha256:"+fpOld[:ShortFingerprintLen]+"…") {
		t.Errorf("table lost the short fingerprint %s:\n%s", fpOld[:ShortFingerprintLen], out)
	}
	if got, want := strings.Join(lines[len(lines)-2:], "\n"), "5 findings (2 critical, 2 warning, 1 info) across 2 envoys; judged 3 of 4 bindings, 5 of 6 handshakes\ncoverage incomplete: 1 binding not judged, 1 handshake without a certificate, 1 input not read"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
	// Every binding is listed with its state under a header, converged ones included.
	for _, want := range []string{"BINDINGS\n   SOURCE            STATE      HELD AS                        BOUND BY\n envoy edge-1\n",
		"   frontend-tls      CONVERGED  SDS frontend", "   internal-ca/mesh  UNKNOWN    file /etc/envoy/ca/mesh.crt", " envoy edge-2\n   frontend-tls      STALE"} {
		if !strings.Contains(out, want) {
			t.Errorf("binding list lacks %q:\n%s", want, out)
		}
	}
}

// TestRenderTableWraps: a message longer than the terminal is wrapped under its finding, every
// word kept; the control renders the same text unwrapped to show the width check can fail.
func TestRenderTableWraps(t *testing.T) {
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 8)
	r := Report{Findings: []Finding{{Code: ParseError, Severity: Warning, Subject: Subject{Source: "s"}, Message: long, Advice: long}}}
	var b bytes.Buffer
	if err := RenderTable(&b, r); err != nil {
		t.Fatal(err)
	}
	var words int
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	for _, l := range lines[:len(lines)-2] { // the summary's two lines stay whole
		if utf8.RuneCountInString(l) > TableWidth {
			t.Errorf("line of %d columns: %q", utf8.RuneCountInString(l), l)
		}
		words += strings.Count(l, "fox")
	}
	if words != 16 {
		t.Errorf("%d of 16 words kept across the wrapped message and advice:\n%s", words, b.String())
	}
	if utf8.RuneCountInString("    "+long) <= TableWidth {
		t.Fatalf("control: the message (%d columns) must be longer than a line", len(long))
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
