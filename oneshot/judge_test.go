package oneshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/remediate"
	"github.com/certdrift/certdrift/test/certs"
)

// unreachableRound is a local round of one desired directory and one Envoy whose admin and TLS
// endpoint are a closed port: a report that is not clean (UNREACHABLE), without a real Envoy.
func unreachableRound(t *testing.T) (*Round, *certs.Authority) {
	t.Helper()
	ca := certs.NewCA(t)
	leaf := ca.Leaf(t, certs.WithDNSNames("web.example.com"))
	dir := t.TempDir()
	certs.WriteFiles(t, dir, map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": ca.CertPEM})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	cfg := writeFile(t, filepath.Join(t.TempDir(), "certdrift.yaml"), fmt.Sprintf(`desired:
  - name: web
    dir: %s
envoys:
  - name: edge
    admin: http://%s
    endpoints:
      - address: %s
        sni: [web.example.com]
        source: web
policy:
  timeout: 2s
`, dir, closed, closed))
	r, err := Gather(context.Background(), Options{Config: cfg, Concurrency: 2, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return r, ca
}

// oneJSON decodes s as exactly one JSON value.
func oneJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("more than one JSON value (%v):\n%s", err, s)
	}
	return v
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestAudit: the report in each format, with and without a repair: a table followed by the
// repair's table, or one JSON document either way; an interrupted audit and a report that
// cannot be written are errors, not output.
func TestAudit(t *testing.T) {
	r, _ := unreachableRound(t)
	log := slog.New(slog.DiscardHandler)
	dry := &Repair{Policy: remediate.Policy{Budget: 5, Timeout: time.Second}, DryRun: true, Log: log}
	cases := map[string]struct {
		reason string
		json   bool
		repair *Repair
		check  func(t *testing.T, out string)
	}{
		"Table": {reason: "the report's table, nothing of repair", check: func(t *testing.T, out string) {
			if !strings.Contains(out, "UNREACHABLE") || strings.Contains(out, "RELOAD") {
				t.Errorf("want the findings table without a reload section:\n%s", out)
			}
		}},
		"TableWithRepair": {reason: "the repair's table follows the report's", repair: dry, check: func(t *testing.T, out string) {
			if i, j := strings.Index(out, "UNREACHABLE"), strings.Index(out, "RELOAD PLAN"); i < 0 || j < i {
				t.Errorf("want the findings, then the reload plan:\n%s", out)
			}
		}},
		"JSON": {reason: "the report alone", json: true, check: func(t *testing.T, out string) {
			if v := oneJSON(t, out); v["findings"] == nil || v["reload"] != nil {
				t.Errorf("want a report with findings and no reload section:\n%s", out)
			}
		}},
		"JSONWithRepair": {reason: "report and results are one document", json: true, repair: dry, check: func(t *testing.T, out string) {
			v := oneJSON(t, out)
			reload, _ := v["reload"].(map[string]any)
			if v["findings"] == nil || reload == nil || reload["dry_run"] != true {
				t.Errorf("want the report with a dry-run reload section:\n%s", out)
			}
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			a, err := r.Audit(context.Background(), Output{W: &buf, JSON: tc.json, Log: log}, tc.repair, time.Now())
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			if !hasCode(a.Report, audit.Unreachable) {
				t.Errorf("%s: the report lacks UNREACHABLE: %+v", tc.reason, a.Report.Findings)
			}
			if tc.repair == nil && a.Repairs != nil {
				t.Errorf("%s: repairs %+v without a repair", tc.reason, a.Repairs)
			}
			tc.check(t, buf.String())
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Audit(ctx, Output{W: io.Discard, Log: log}, nil, time.Now()); err == nil || !strings.Contains(err.Error(), "audit interrupted") {
		t.Errorf("interrupted: %v, want audit interrupted", err)
	}
	if _, err := r.Audit(context.Background(), Output{W: failingWriter{}, Log: log}, nil, time.Now()); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("unwritable report: %v, want the write error", err)
	}
}

func hasCode(r audit.Report, c audit.Code) bool {
	for _, f := range r.Findings {
		if f.Code == c {
			return true
		}
	}
	return false
}

// TestPreflight: the verdict on a candidate leaf written as a table or one JSON document, the
// audit command passed through to the steps; an interrupted preflight is an error.
func TestPreflight(t *testing.T) {
	r, ca := unreachableRound(t)
	log := slog.New(slog.DiscardHandler)
	next := ca.Leaf(t, certs.WithDNSNames("web.example.com"))
	cands := []desired.Candidate{{Source: "web", From: "next.pem", Chain: next.Chain()}}
	var table, js bytes.Buffer
	p, err := r.Preflight(context.Background(), Output{W: &table, Log: log}, cands, "certdrift audit --config X")
	if err != nil {
		t.Fatal(err)
	}
	if p.Verdict == "" || !strings.Contains(table.String(), ": "+strings.ToUpper(p.Verdict)+" — ") {
		t.Errorf("the table does not state the verdict %q:\n%s", p.Verdict, table.String())
	}
	if _, err := r.Preflight(context.Background(), Output{W: &js, JSON: true, Log: log}, cands, "certdrift audit --config X"); err != nil {
		t.Fatal(err)
	}
	if v := oneJSON(t, js.String()); v["verdict"] != p.Verdict {
		t.Errorf("JSON verdict %v, want %q:\n%s", v["verdict"], p.Verdict, js.String())
	}
	if !strings.Contains(table.String()+js.String(), "certdrift audit --config X") {
		t.Errorf("the audit command is not in the steps:\n%s\n%s", table.String(), js.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Preflight(ctx, Output{W: io.Discard, Log: log}, cands, ""); err == nil || !strings.Contains(err.Error(), "preflight interrupted") {
		t.Errorf("interrupted: %v, want preflight interrupted", err)
	}
}
