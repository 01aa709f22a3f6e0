package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/proc"
)

// serveProc is `certdrift serve` run as the real binary, so that signals reach it as they do in
// a pod.
type serveProc struct {
	cmd     *exec.Cmd
	logs    *proc.SyncBuffer
	done    chan struct{}
	metrics string // base URL of the (first) metrics address
	probes  string // base URL of --web.probe-address, when asked for
}

// startServe starts the binary with args, plus a loopback metrics address; prefix runs it under
// another command (prlimit). It does not wait for the listeners: see listening.
func startServe(t *testing.T, prefix []string, args ...string) *serveProc {
	t.Helper()
	argv := append(append(append([]string{}, prefix...), binary, "serve"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	p := &serveProc{cmd: cmd, logs: &proc.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = io.Discard, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("--- certdrift serve log:\n%s", tail(p.logs.String(), 6000))
		}
		if strings.Contains(p.logs.String(), "PRIVATE KEY") {
			t.Error("certdrift serve logged private key material")
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

var listenRE = regexp.MustCompile(`msg="serving (metrics|probes)" address=(\S+)`)

// listening waits until the process logged its addresses (want: how many).
func (p *serveProc) listening(t *testing.T, want int) {
	t.Helper()
	eventually(t, "certdrift serve to listen", 20*time.Second, func() (bool, string) {
		addrs := map[string]string{}
		for _, m := range listenRE.FindAllStringSubmatch(p.logs.String(), -1) {
			addrs[m[1]] = "http://" + m[2]
		}
		p.metrics, p.probes = addrs["metrics"], addrs["probes"]
		select {
		case <-p.done:
			t.Fatalf("certdrift serve exited before listening (%v)", p.cmd.ProcessState)
		default:
		}
		return len(addrs) == want, p.logs.String()
	})
}

// exited waits at most d for the process to end and returns its exit code.
func (p *serveProc) exited(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("certdrift serve still running %s later", d)
		return -1
	}
}

// sigterm sends SIGTERM and requires the process to end within 2s with exit 0.
func (p *serveProc) sigterm(t *testing.T) {
	t.Helper()
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if code := p.exited(t, 2*time.Second); code != codeClean {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
	t.Logf("exited %s after SIGTERM", time.Since(sent).Round(time.Millisecond))
}

// TestHostileFiles: a FIFO with no writer and /dev/zero, named as a client certificate, as the
// configuration and as a desired certificate, each give an error naming the file and saying what
// it is, at once, in `audit` and in `serve`; serve stays ready, a reload onto such a config is
// answered, and SIGTERM ends it within 2s. Before the bounded reader, the FIFO hung both
// commands forever and /dev/zero ended them with an out-of-memory fatal error.
func TestHostileFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	ca := certs.NewCA(t, certs.WithCommonName("hostile-ca"))
	leaf := ca.Leaf(t, certs.WithCommonName("web"), certs.WithDNSNames("www.example.com"))
	certs.WriteFiles(t, filepath.Join(dir, "good"), map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM})
	good := filepath.Join(dir, "good", "tls.crt")
	key := filepath.Join(dir, "good", "tls.key")
	endpoint := closedPort(t)

	// config is a local-mode file reading desired from desiredCert and presenting clientCert.
	config := func(desiredCert, clientCert string) string {
		return fmt.Sprintf(`desired:
  - name: web
    cert_file: %s
    key_file: %s
envoys:
  - name: edge
    endpoints:
      - address: %s
        source: web
        client_cert: {cert_file: %s, key_file: %s}
policy:
  timeout: 1s
`, desiredCert, key, endpoint, clientCert, key)
	}

	for _, h := range []struct {
		name, path, says string
	}{
		{"FIFO", fifo, "is a FIFO"},
		{"DevZero", "/dev/zero", "is a device"},
	} {
		for _, tc := range []struct {
			where    string
			config   func() string // --config
			wantCode int
			series   string // the finding serve exposes for it
		}{
			{"ClientCert", func() string { return writeConfig(t, config(good, h.path)) }, codeFindings, `code="UNREACHABLE"`},
			{"Desired", func() string { return writeConfig(t, config(h.path, good)) }, codeFindings, `code="PARSE_ERROR"`},
			{"Config", func() string { return h.path }, codeNoRun, ""},
		} {
			t.Run(h.name+"As"+tc.where, func(t *testing.T) {
				cfg := tc.config()
				r := certdrift(t, nil, "audit", "--config", cfg)
				if r.code != tc.wantCode {
					t.Errorf("audit: exit %d, want %d\n%s", r.code, tc.wantCode, r)
				}
				// The table wraps messages at word boundaries: compare with the wrapping undone.
				if out := strings.Join(strings.Fields(r.stdout+r.stderr), " "); !strings.Contains(out, h.path) || !strings.Contains(out, h.says) {
					t.Errorf("audit output does not name %s and say %q:\n%s", h.path, h.says, r)
				}

				p := startServe(t, nil, "--config", cfg, "--web.listen-address", "127.0.0.1:0", "--interval", "1s")
				if tc.where == "Config" {
					if code := p.exited(t, 10*time.Second); code != codeNoRun {
						t.Errorf("serve with --config %s: exit %d, want %d", h.path, code, codeNoRun)
					}
					if logs := p.logs.String(); !strings.Contains(logs, h.path) || !strings.Contains(logs, h.says) {
						t.Errorf("serve does not name %s and say %q:\n%s", h.path, h.says, logs)
					}
					return
				}
				p.listening(t, 1)
				eventually(t, "serve to be ready (the first round not wedged)", 20*time.Second, func() (bool, string) {
					code, body := get(t, "GET", p.metrics+"/-/ready")
					return code == http.StatusOK, body
				})
				if _, body := get(t, "GET", p.metrics+"/metrics"); !strings.Contains(body, tc.series) {
					t.Errorf("/metrics lacks the finding %s for the %s", tc.series, tc.where)
				}
				// A reload onto a config that became a FIFO or a device is answered at once.
				if err := os.Remove(cfg); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(h.path, cfg); err != nil {
					t.Fatal(err)
				}
				code, body := get(t, "POST", p.metrics+"/-/reload")
				if code != http.StatusInternalServerError || !strings.Contains(body, cfg) || !strings.Contains(body, h.says) {
					t.Errorf("reload onto %s: %d %q, want 500 naming %s and saying %q", h.path, code, body, cfg, h.says)
				}
				p.sigterm(t)
			})
		}
	}
}

// TestSIGTERMDuringFirstRound: SIGTERM right after the listeners are up, while the first round
// is still waiting on an Envoy admin that never answers, ends serve within 2s.
func TestSIGTERMDuringFirstRound(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf("envoys:\n  - name: hole\n    admin: http://%s\npolicy:\n  timeout: 30s\n", blackhole(t)))
	p := startServe(t, nil, "--config", cfg, "--web.listen-address", "127.0.0.1:0", "--interval", "60s")
	p.listening(t, 1)
	if code, _ := get(t, "GET", p.metrics+"/-/ready"); code != http.StatusServiceUnavailable {
		t.Fatalf("/-/ready %d: the first round should still be running", code)
	}
	p.sigterm(t)
}

// TestConfigEveryError: a configuration with three different bad values (a list where an
// address goes, a duration in words, a word where a number goes) is refused by `audit
// --config.check` and by `serve` with all three errors, each with its line and field.
func TestConfigEveryError(t *testing.T) {
	cfg, err := filepath.Abs(filepath.Join("..", "..", "config", "testdata", "three_errors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"line 8, column 18: envoys[0].endpoints[0].address: want a string, got a list",
		`line 10, column 10: policy.grace: time: unknown unit " minutes"`,
		`line 11, column 19: policy.max_bundle_cas: want a number, got the text "two"`,
	}
	r := certdrift(t, nil, "audit", "--config.check", "--config", cfg)
	if r.code != codeNoRun {
		t.Errorf("audit --config.check: exit %d, want %d", r.code, codeNoRun)
	}
	p := startServe(t, nil, "--config", cfg, "--web.listen-address", "127.0.0.1:0")
	if code := p.exited(t, 10*time.Second); code != codeNoRun {
		t.Errorf("serve: exit %d, want %d", code, codeNoRun)
	}
	for _, out := range []string{r.stderr, p.logs.String()} {
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	}
}

// TestHostileKubeconfig: a FIFO or /dev/zero as --kubeconfig stops audit and serve at once with
// exit 2, naming the file.
func TestHostileKubeconfig(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "kubeconfig")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		r := certdrift(t, nil, "audit", "--kubeconfig", path)
		if r.code != codeNoRun || !strings.Contains(r.stderr, path) || !strings.Contains(r.stderr, "not a regular file") {
			t.Errorf("audit --kubeconfig %s: want exit 2 naming the file\n%s", path, r)
		}
		p := startServe(t, nil, "--kubeconfig", path, "--web.listen-address", "127.0.0.1:0")
		if code := p.exited(t, 10*time.Second); code != codeNoRun {
			t.Errorf("serve --kubeconfig %s: exit %d, want 2", path, code)
		}
		if logs := p.logs.String(); !strings.Contains(logs, path) || !strings.Contains(logs, "not a regular file") {
			t.Errorf("serve --kubeconfig %s does not name the file:\n%s", path, logs)
		}
	}
}

// TestHostileWebConfig: a FIFO or /dev/zero as --web.config.file, or as a file it names, stops
// serve at once with exit 2, naming the file (exporter-toolkit alone would block on the FIFO).
func TestHostileWebConfig(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	cfg := writeConfig(t, "envoys:\n  - name: e\n    admin: http://127.0.0.1:1\n")
	naming := func(file string) string {
		p := filepath.Join(t.TempDir(), "web.yaml")
		body := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", file, file)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, tc := range map[string]struct{ webConfig, names string }{
		"FIFO":           {fifo, fifo},
		"DevZero":        {"/dev/zero", "/dev/zero"},
		"CertFileFIFO":   {naming(fifo), "tls_server_config.cert_file"},
		"CertFileDevice": {naming("/dev/zero"), "tls_server_config.cert_file"},
	} {
		t.Run(name, func(t *testing.T) {
			p := startServe(t, nil, "--config", cfg, "--web.config.file", tc.webConfig, "--web.listen-address", "127.0.0.1:0")
			if code := p.exited(t, 10*time.Second); code != codeNoRun {
				t.Errorf("exit %d, want 2", code)
			}
			if logs := p.logs.String(); !strings.Contains(logs, tc.names) || !strings.Contains(logs, "not a regular file") {
				t.Errorf("serve does not name %s as not a regular file:\n%s", tc.names, logs)
			}
		})
	}
}
