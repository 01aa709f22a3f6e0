package scenarios

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/testbed"
)

// The scenarios are also where certdrift's Kubernetes mode is proven: each test runs the built
// binary, given only the testbed's kubeconfig, at the moments that matter (before a rotation, in
// its window, after it converged or did not) and checks what it reports.

// certdriftBinary builds cmd/certdrift once per test binary.
func certdriftBinary(t *testing.T) string {
	t.Helper()
	bin, err := cdbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// auditReport is the part of certdrift's JSON report the scenarios read.
type auditReport struct {
	Bindings []struct {
		Envoy    string `json:"envoy"`
		Source   string `json:"source"`
		Item     string `json:"item"`
		Secret   string `json:"secret"`
		File     string `json:"file"`
		Workload string `json:"workload"`
		Origin   string `json:"origin"`
		State    string `json:"state"`
		Trust    bool   `json:"trust"`
		Reason   string `json:"reason"`
	} `json:"bindings"`
	Findings []auditFinding `json:"findings"`
	// CertManager is audit.Report's cert_manager: each Certificate with the revision each view holds.
	CertManager []struct {
		Name           string `json:"name"`
		Revision       int    `json:"revision"`
		Ready          string `json:"ready"`
		SecretRevision int    `json:"secret_revision"`
		Envoys         []struct {
			Envoy    string `json:"envoy"`
			View     string `json:"view"`
			Revision int    `json:"revision"`
		} `json:"envoys"`
	} `json:"cert_manager"`
	Summary struct {
		Coverage struct {
			BindingsJudged   int  `json:"bindings_judged"`
			Bindings         int  `json:"bindings"`
			HandshakesJudged int  `json:"handshakes_judged"`
			Handshakes       int  `json:"handshakes"`
			Complete         bool `json:"complete"`
		} `json:"coverage"`
	} `json:"summary"`
	// Reload is present with --reload (docs/repair.md).
	Reload *struct {
		DryRun  bool `json:"dry_run"`
		Results []struct {
			Strategy string `json:"strategy"`
			Target   struct {
				Envoy    string `json:"envoy"`
				Workload string `json:"workload"`
			} `json:"target"`
			Outcome string `json:"outcome"`
			Skip    string `json:"skip"`
			Detail  string `json:"detail"`
		} `json:"results"`
	} `json:"reload"`
}

type auditFinding struct {
	Code     string `json:"code"`
	Severity string `json:"severity"`
	Subject  struct {
		Envoy    string `json:"envoy"`
		Workload string `json:"workload"`
		Source   string `json:"source"`
		SNI      string `json:"sni"`
		File     string `json:"file"`
	} `json:"subject"`
	Evidence map[string]string `json:"evidence"`
	Message  string            `json:"message"`
}

// runAudit runs `certdrift audit --kubeconfig` for one namespace and returns its exit code and
// report; every finding is logged as OBSERVED so a run documents itself. Secret contents never
// reach the output (the helpers that mint them check their own keys where it matters).
func runAudit(t *testing.T, ns string, args ...string) (int, auditReport) {
	t.Helper()
	return runAuditOn(t, tb, ns, args...)
}

// runAuditOn is runAudit against another testbed than the package's.
func runAuditOn(t *testing.T, bed *testbed.Testbed, ns string, args ...string) (int, auditReport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	full := append([]string{"audit", "--kubeconfig", bed.KubeconfigPath, "--namespace", ns, "-o", "json"}, args...)
	bin := certdriftBinary(t)
	start := time.Now()
	res, err := cdbin.Run(ctx, bin, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, full...)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	code := res.Code
	if strings.Contains(res.Stdout+res.Stderr, "PRIVATE KEY") {
		t.Fatalf("certdrift printed private key material")
	}
	var r auditReport
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("certdrift %s: exit %d, report is not JSON: %v\n%s", strings.Join(args, " "), code, err, res.Output())
	}
	t.Logf("OBSERVED: certdrift audit -n %s %s: exit %d, %d findings, %d bindings, %s wall", ns, strings.Join(args, " "), code, len(r.Findings), len(r.Bindings), took.Round(time.Millisecond))
	for _, f := range r.Findings {
		t.Logf("OBSERVED:   %s %s %s (%s): %s", f.Severity, f.Code, f.Subject.Envoy, f.Subject.Source, f.Message)
	}
	c := r.Summary.Coverage
	t.Logf("OBSERVED:   coverage: judged %d of %d bindings, %d of %d handshakes (complete %v)", c.BindingsJudged, c.Bindings, c.HandshakesJudged, c.Handshakes, c.Complete)
	for _, b := range r.Bindings {
		if b.State == "unknown" {
			t.Logf("OBSERVED:   not judged: %s %s (trust %v, secret %q, origin %s): %s", b.Envoy, b.Source, b.Trust, b.Secret, b.Origin, b.Reason)
		}
	}
	return code, r
}

// findings returns "CODE severity envoy" for every finding with one of codes (all when none),
// sorted and without repeats (one per handshake becomes one per pod), for comparison with what a
// scenario expects.
func (r auditReport) findings(codes ...string) []string {
	var out []string
	for _, f := range r.Findings {
		if len(codes) == 0 || slices.Contains(codes, f.Code) {
			out = append(out, f.Code+" "+f.Severity+" "+f.Subject.Envoy)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// writeConfig writes a Kubernetes-mode config file (pairings and policy) and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "certdrift.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
