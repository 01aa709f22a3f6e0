package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

// binary is the certdrift binary built once for all tests, with version and commit set the way
// a release build sets them.
var binary string

// The exit codes are a documented interface, so the tests spell them out rather than reuse the
// constants under test.
const (
	codeClean    = 0
	codeFindings = 1
	codeNoRun    = 2
)

const (
	testVersion = "v0.0.0-test"
	testCommit  = "0123abcd"
)

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "certdrift-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "create temp dir:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "certdrift")
	cmd := exec.Command("go", "build", "-o", binary,
		"-ldflags", fmt.Sprintf("-X main.version=%s -X main.commit=%s", testVersion, testCommit), ".")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build certdrift for the tests (needs the go tool on PATH):", err)
		return 2
	}
	return bed.Main(m)
}

// bed is a control plane (API server, no nodes) for the in-process tests that need the
// Kubernetes API; it starts on first use, so the other tests run without it.
var bed = testbed.Shared{Options: testbed.Options{Nodes: -1}}

type result struct {
	stdout, stderr string
	code           int
}

// certdrift runs the built binary with args and extra environment, and never for long.
func certdrift(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	// A clean environment, so a CERTDRIFT_* variable of the developer's cannot change a test.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("run certdrift %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("certdrift %v did not finish within 60s; stderr:\n%s", args, r.stderr)
	}
	// No output of certdrift may ever carry private key material.
	for _, s := range []string{r.stdout, r.stderr} {
		if strings.Contains(s, "PRIVATE KEY") {
			t.Errorf("certdrift %v printed private key material", args)
		}
	}
	return r
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

func TestHelp(t *testing.T) {
	tests := map[string]struct {
		reason string
		args   []string
		want   []string
	}{
		"Root": {
			reason: "the root help lists the commands",
			args:   []string{"--help"},
			want:   []string{"audit", "preflight", "version", "--log.level"},
		},
		"Audit": {
			reason: "audit help lists its flags and their environment variables",
			args:   []string{"audit", "--help"},
			want:   []string{"--config", "--config.check", "--fail-on", "--output", "--timeout", "--concurrency", "CERTDRIFT_CONFIG", "CERTDRIFT_FAIL_ON"},
		},
		"HelpCommand": {
			reason: "certdrift help is the root help, as git and kubectl have it",
			args:   []string{"help"},
			want:   []string{"Usage: certdrift <command>", "audit", "serve", "help"},
		},
		"HelpAudit": {
			reason: "certdrift help audit is audit --help: examples, then the flags in groups",
			args:   []string{"help", "audit"},
			want:   []string{"Usage: certdrift audit", "Examples:", "certdrift audit --config certdrift.yaml", "Kubernetes mode (with --kubeconfig or --in-cluster):", "Repair (docs/repair.md):", "--reload"},
		},
		"Preflight": {
			reason: "preflight --help documents its exit codes, inputs and examples",
			args:   []string{"preflight", "--help"},
			want:   []string{"Exit codes: 0 the rotation is safe", "3 cannot tell", "--leaf=SOURCE=FILE", "--bundle=SOURCE=FILE", "--secret=[SOURCE=]FILE", "Examples:", "Kubernetes mode (with --kubeconfig or --in-cluster):"},
		},
		"ServeGroups": {
			reason: "serve --help groups the web flags apart from the Kubernetes and repair ones",
			args:   []string{"serve", "--help"},
			want:   []string{"Examples:", "--config.check", "Exposition (the metrics and probe ports):", "--web.listen-address", "Kubernetes mode (with --kubeconfig or --in-cluster):", "Repair (docs/repair.md):", "--remediate"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := certdrift(t, nil, tc.args...)
			if r.code != codeClean {
				t.Fatalf("%s: want exit 0\n%s", tc.reason, r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("%s: help does not mention %q\n%s", tc.reason, w, r)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	r := certdrift(t, nil, "version")
	if r.code != codeClean {
		t.Fatalf("want exit 0\n%s", r)
	}
	for _, w := range []string{testVersion, testCommit, runtime.Version()} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("version output lacks %q (set by -ldflags -X or the Go runtime)\n%s", w, r)
		}
	}
	// --version prints what the command prints.
	flag := certdrift(t, nil, "--version")
	if flag.code != codeClean || flag.stdout != r.stdout {
		t.Errorf("certdrift --version: want exit 0 and the output of certdrift version (%q)\n%s", r.stdout, flag)
	}
}

// TestHelpUnknownCommand: help for a command that does not exist is a usage error, not help.
func TestHelpUnknownCommand(t *testing.T) {
	r := certdrift(t, nil, "help", "bogus")
	if r.code != codeNoRun || !strings.Contains(r.stderr, "bogus") || strings.Contains(r.stdout, "Usage:") {
		t.Errorf("certdrift help bogus: want exit %d naming bogus on stderr and no help\n%s", codeNoRun, r)
	}
}

func TestUsageErrors(t *testing.T) {
	cfg := writeConfig(t, "desired: [{name: a, dir: /nonexistent}]\n")
	tests := map[string]struct {
		reason string
		args   []string
		want   string // in stderr
	}{
		"NoCommand":        {reason: "a command is required", args: nil, want: "expected"},
		"UnknownFlag":      {reason: "an unknown flag is a usage error", args: []string{"audit", "--config", cfg, "--bogus"}, want: "--bogus"},
		"MissingConfig":    {reason: "audit needs a config", args: []string{"audit"}, want: "--config"},
		"BadOutput":        {reason: "-o takes table or json", args: []string{"audit", "--config", cfg, "-o", "yaml"}, want: "yaml"},
		"BadFailOn":        {reason: "--fail-on takes a severity", args: []string{"audit", "--config", cfg, "--fail-on", "severe"}, want: "severe"},
		"ZeroConcurrency":  {reason: "--concurrency must be positive", args: []string{"audit", "--config", cfg, "--concurrency", "0"}, want: "--concurrency"},
		"BadTimeout":       {reason: "--timeout is a duration", args: []string{"audit", "--config", cfg, "--timeout", "soon"}, want: "soon"},
		"BadLogLevel":      {reason: "--log.level is a closed set", args: []string{"--log.level", "loud", "version"}, want: "loud"},
		"MissingFile":      {reason: "a config file that does not exist cannot run", args: []string{"audit", "--config", filepath.Join(t.TempDir(), "nope.yaml")}, want: "nope.yaml"},
		"MissingFileCheck": {reason: "--config.check of a missing file fails too", args: []string{"audit", "--config.check", "--config", filepath.Join(t.TempDir(), "nope.yaml")}, want: "nope.yaml"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := certdrift(t, nil, tc.args...)
			if r.code != codeNoRun {
				t.Fatalf("%s: want exit %d\n%s", tc.reason, codeNoRun, r)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%s: stderr does not mention %q\n%s", tc.reason, tc.want, r)
			}
			if r.stdout != "" && strings.Contains(r.stdout, "findings") {
				t.Errorf("%s: a run that could not start printed a report\n%s", tc.reason, r)
			}
		})
	}
}

func TestConfigCheck(t *testing.T) {
	good := writeConfig(t, `
desired:
  - name: frontend
    dir: /etc/certs/frontend
  - name: ca
    ca_file: /etc/certs/ca.crt
envoys:
  - name: edge
    admin: http://127.0.0.1:9901
`)
	bad := writeConfig(t, `
desired:
  - name: frontend
    dir: /etc/certs/frontend
    cert_fiel: tls.crt
`)
	dangling := writeConfig(t, `
desired:
  - name: frontend
    dir: /etc/certs/frontend
envoys:
  - name: edge
    endpoints: [{address: "127.0.0.1:8443", source: nowhere}]
`)
	tests := map[string]struct {
		reason   string
		env      []string
		args     []string
		wantCode int
		stdout   []string
		stderr   []string
	}{
		"Good": {
			reason: "a valid config is summarised",
			args:   []string{"audit", "--config.check", "--config", good},
			stdout: []string{"config OK: 2 desired sources, 1 envoy\n"},
		},
		"ServeGood": {
			reason: "serve --config.check validates and exits, as blackbox_exporter's does",
			args:   []string{"serve", "--config.check", "--config", good},
			stdout: []string{"config OK: 2 desired sources, 1 envoy\n"},
		},
		"ServeBad": {
			reason:   "serve --config.check of a bad file exits 2 and names the field",
			args:     []string{"serve", "--config.check", "--config", bad},
			wantCode: codeNoRun,
			stderr:   []string{"is invalid", "cert_fiel", "line 5"},
		},
		"ServeBadFlag": {
			reason:   "serve --config.check checks the flags too",
			args:     []string{"serve", "--config.check", "--config", good, "--web.max-requests", "0"},
			wantCode: codeNoRun,
			stderr:   []string{"--web.max-requests"},
		},
		"KubeModeFile": {
			reason:   "with --kubeconfig the file may hold only pairings and policy: checked as Kubernetes mode reads it",
			args:     []string{"audit", "--config.check", "--config", good, "--kubeconfig", good},
			wantCode: codeNoRun,
			stderr:   []string{"desired and envoys are not used with --kubeconfig"},
		},
		"JSONGood": {
			reason: "audit --config.check -o json prints a JSON verdict",
			args:   []string{"audit", "--config.check", "--config", good, "-o", "json"},
			stdout: []string{`"valid": true`, `"desired_sources": 2`, `"envoys": 1`, `"errors": []`},
		},
		"JSONBad": {
			reason:   "a bad file's JSON verdict lists each error with its line and field, on stdout",
			args:     []string{"audit", "--config.check", "--config", bad, "-o", "json"},
			wantCode: codeNoRun,
			stdout:   []string{`"valid": false`, `"line": 5`, `"field": "desired[0].cert_fiel"`},
		},
		"GoodFromEnv": {
			reason: "CERTDRIFT_CONFIG and CERTDRIFT_CONFIG_CHECK stand in for the flags",
			env:    []string{"CERTDRIFT_CONFIG=" + good, "CERTDRIFT_CONFIG_CHECK=true"},
			args:   []string{"audit"},
			stdout: []string{"config OK"},
		},
		"UnknownField": {
			reason:   "strict decoding names the field and its line",
			args:     []string{"audit", "--config.check", "--config", bad},
			wantCode: codeNoRun,
			stderr:   []string{"cert_fiel", "line 5"},
		},
		"DanglingSource": {
			reason:   "validation names the path of the bad reference",
			args:     []string{"audit", "--config.check", "--config", dangling},
			wantCode: codeNoRun,
			stderr:   []string{"envoys[0].endpoints[0]", "nowhere"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := certdrift(t, tc.env, tc.args...)
			if r.code != tc.wantCode {
				t.Fatalf("%s: want exit %d\n%s", tc.reason, tc.wantCode, r)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("%s: stdout lacks %q\n%s", tc.reason, w, r)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("%s: stderr lacks %q\n%s", tc.reason, w, r)
				}
			}
		})
	}
}

// localSetup writes two desired sources minted with test/certs (a kubelet-style directory and
// explicit files) and a config whose Envoy admin and TLS endpoint point at a closed port.
func localSetup(t *testing.T) (cfgPath, closedAddr string) {
	t.Helper()
	dir := t.TempDir()
	ca := certs.NewCA(t, certs.WithCommonName("certdrift test CA"))
	front := ca.Leaf(t, certs.WithDNSNames("shop.example.com"))
	api := ca.Leaf(t, certs.WithDNSNames("api.example.com"))
	certs.WriteFiles(t, dir, map[string][]byte{
		"frontend/tls.crt": front.ChainPEM(),
		"frontend/tls.key": front.KeyPEM,
		"frontend/ca.crt":  certs.Bundle(ca),
		"api/cert.pem":     api.ChainPEM(),
		"api/key.pem":      api.KeyPEM,
	})
	closedAddr = closedPort(t)
	cfgPath = writeConfig(t, fmt.Sprintf(`
desired:
  - name: frontend
    dir: %[1]s/frontend
  - name: api
    cert_file: %[1]s/api/cert.pem
    key_file: %[1]s/api/key.pem
envoys:
  - name: edge-down
    admin: http://%[2]s
    endpoints:
      - address: %[2]s
        sni: [shop.example.com]
        source: frontend
policy:
  timeout: 2s
`, dir, closedAddr))
	return cfgPath, closedAddr
}

func TestAuditLocalUnreachable(t *testing.T) {
	cfg, closed := localSetup(t)

	t.Run("Table", func(t *testing.T) {
		r := certdrift(t, nil, "audit", "--config", cfg)
		if r.code != codeFindings {
			t.Fatalf("an unreachable Envoy is a warning, at the default --fail-on: want exit %d\n%s", codeFindings, r)
		}
		for _, w := range []string{"envoy edge-down", "UNREACHABLE", "across 1 envoy"} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("table lacks %q\n%s", w, r)
			}
		}
	})

	t.Run("JSON", func(t *testing.T) {
		r := certdrift(t, nil, "audit", "--config", cfg, "-o", "json")
		if r.code != codeFindings {
			t.Fatalf("want exit %d\n%s", codeFindings, r)
		}
		var rep audit.Report
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rep); err != nil {
			t.Fatalf("-o json does not decode into audit.Report: %v\n%s", err, r)
		}
		if rep.Summary.DesiredSources != 2 || rep.Summary.Envoys != 1 {
			t.Errorf("summary = %+v, want 2 desired sources and 1 envoy", rep.Summary)
		}
		if rep.Summary.Handshakes != 1 {
			t.Errorf("summary.handshakes = %d, want 1 (one endpoint, one SNI)", rep.Summary.Handshakes)
		}
		var admin, served bool
		for _, f := range rep.Findings {
			if f.Code != audit.Unreachable || f.Subject.Envoy != "edge-down" {
				continue
			}
			if strings.Contains(f.Subject.Endpoint, "http://") {
				admin = true
			} else if f.Subject.Endpoint == closed {
				served = true
			}
		}
		if !admin || !served {
			t.Errorf("want UNREACHABLE for both the admin endpoint (%v) and the TLS endpoint %s (%v); findings: %+v",
				admin, closed, served, rep.Findings)
		}
		for _, f := range rep.Findings {
			if f.Subject.Source != "" && f.Code != audit.Unreachable {
				t.Errorf("the desired certificates are fresh and valid; unexpected finding %s %s: %s", f.Severity, f.Code, f.Message)
			}
		}
	})

	t.Run("FailOnCritical", func(t *testing.T) {
		// Only warnings, but nothing could be judged: that is not clean at any --fail-on.
		r := certdrift(t, []string{"CERTDRIFT_FAIL_ON=critical"}, "audit", "--config", cfg)
		if r.code != codeFindings || !strings.Contains(r.stderr, "coverage incomplete") {
			t.Fatalf("nothing judged, --fail-on critical (from the environment): want exit %d and a coverage error\n%s", codeFindings, r)
		}
		if !strings.Contains(r.stdout, "UNREACHABLE") || !strings.Contains(r.stdout, "coverage incomplete") {
			t.Errorf("findings below --fail-on and the coverage are still reported\n%s", r)
		}
	})

	t.Run("AllowPartial", func(t *testing.T) {
		r := certdrift(t, []string{"CERTDRIFT_FAIL_ON=critical"}, "audit", "--config", cfg, "--allow-partial")
		if r.code != codeClean {
			t.Fatalf("only warnings, --fail-on critical and --allow-partial: want exit 0\n%s", r)
		}
	})

	t.Run("JSONLogs", func(t *testing.T) {
		r := certdrift(t, nil, "--log.format", "json", "--log.level", "debug", "audit", "--config", cfg)
		if r.code != codeFindings {
			t.Fatalf("want exit %d\n%s", codeFindings, r)
		}
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if len(lines) == 0 || lines[0] == "" {
			t.Fatalf("debug logging wrote nothing\n%s", r)
		}
		for _, l := range lines {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Errorf("stderr line is not JSON (logs only on stderr): %q", l)
			}
		}
		if strings.Contains(r.stdout, `"level"`) {
			t.Errorf("log lines leaked into stdout\n%s", r)
		}
	})
}

func TestAuditClean(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t)
	leaf := ca.Leaf(t, certs.WithDNSNames("shop.example.com"))
	certs.WriteFiles(t, dir, map[string][]byte{"tls.crt": leaf.ChainPEM(), "tls.key": leaf.KeyPEM, "ca.crt": certs.Bundle(ca)})
	cfg := writeConfig(t, fmt.Sprintf("desired: [{name: frontend, dir: %s}]\n", dir))
	r := certdrift(t, nil, "audit", "--config", cfg)
	if r.code != codeClean {
		t.Fatalf("fresh certificates and no Envoys: want exit 0\n%s", r)
	}
	if !strings.HasPrefix(r.stdout, "certdrift audit at ") || !strings.Contains(r.stdout, "\nclean: 0 findings") {
		t.Errorf("a clean audit says so\n%s", r)
	}
	// The report is the output: a run that went well leaves stderr empty unless asked.
	if r.stderr != "" {
		t.Errorf("a clean audit wrote to stderr at the default log level\n%s", r)
	}
	// Control: the same run at --log.level info does log, so the check above can fail.
	if r := certdrift(t, []string{"CERTDRIFT_LOG_LEVEL=info"}, "audit", "--config", cfg); !strings.Contains(r.stderr, "audit finished") {
		t.Errorf("--log.level info (from the environment) logs the audit's end\n%s", r)
	}
}

func TestAuditDesiredFindingExits1(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t)
	leaf := ca.Leaf(t, certs.Expired())
	certs.WriteFiles(t, dir, map[string][]byte{"tls.crt": leaf.ChainPEM(), "tls.key": leaf.KeyPEM})
	cfg := writeConfig(t, fmt.Sprintf("desired: [{name: old, dir: %s}]\n", dir))
	r := certdrift(t, nil, "audit", "--config", cfg, "--fail-on", "critical")
	if r.code != codeFindings {
		t.Fatalf("an expired desired certificate is critical: want exit %d\n%s", codeFindings, r)
	}
	if !strings.Contains(r.stdout, "EXPIRED") || !strings.Contains(r.stdout, "source old") {
		t.Errorf("want EXPIRED grouped under source old\n%s", r)
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "certdrift.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// closedPort returns a loopback address nothing listens on: bound, then released.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
