package envoytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// Config says how to start one Envoy.
type Config struct {
	// Bootstrap is a text/template of a complete Envoy bootstrap in YAML. It is executed with
	// Params as data and these functions:
	//   {{port "name"}}  a free loopback TCP port, the same number for the same name; use it
	//                    when the port must be known before Envoy starts. Otherwise write
	//                    port_value: 0 and read the bound address with ListenerAddr.
	//   {{yamlstr s}}    s quoted as a YAML (JSON) string, for paths.
	// The admin section must listen on 127.0.0.1 port 0 (use {{.AdminSocket}}): the harness
	// learns the bound address through --admin-address-path, which cannot race with other tests.
	Bootstrap string
	// Data is passed to the template as .Data.
	Data any
	// Binary overrides the binary chosen by the environment.
	Binary *Binary
	// ReadyTimeout bounds the wait for GET /ready to return 200. Default 60s: the CI machine is
	// small and shared.
	ReadyTimeout time.Duration
	// ExtraArgs are appended to Envoy's command line.
	ExtraArgs []string
}

// Params is the template data of Config.Bootstrap.
type Params struct {
	// Dir is a directory private to this Envoy (inside t.TempDir()), for SDS files and the like.
	Dir string
	// AdminSocket is the YAML of an admin socket_address on 127.0.0.1 with an ephemeral port.
	AdminSocket string
	Data        any
}

// Envoy is a running Envoy process.
type Envoy struct {
	t       TB
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
	Binary  Binary
	Dir     string
	// ConfigPath is the rendered bootstrap file.
	ConfigPath string
	// AdminURL is "http://127.0.0.1:<port>", without a trailing slash.
	AdminURL string
	// Ports holds the ports allocated by {{port "name"}}.
	Ports   map[string]int
	logPath string
	errPath string
}

// Version is the Envoy version of the running binary ("1.40.0").
func (e *Envoy) Version() string { return e.Binary.Version }

// Start renders cfg.Bootstrap, starts Envoy, and waits until it is ready. Envoy is stopped when
// the test ends; if the test failed, the tail of its log (private keys redacted) is printed.
func Start(t TB, cfg Config) *Envoy {
	t.Helper()
	bin := cfg.Binary
	if bin == nil {
		b := ResolveBinary(t)
		bin = &b
	}
	dir, err := os.MkdirTemp(t.TempDir(), "envoy-")
	if err != nil {
		t.Fatalf("envoytest: %v", err)
	}
	e := &Envoy{
		t:          t,
		Binary:     *bin,
		Dir:        dir,
		ConfigPath: filepath.Join(dir, "bootstrap.yaml"),
		Ports:      map[string]int{},
		logPath:    filepath.Join(dir, "envoy.log"),
		errPath:    filepath.Join(dir, "envoy.stderr"),
		exited:     make(chan struct{}),
	}
	if err := e.render(cfg); err != nil {
		t.Fatalf("envoytest: render bootstrap: %v", err)
	}
	adminPath := filepath.Join(dir, "admin-address")
	args := []string{
		"-c", e.ConfigPath,
		"-l", "info",
		"--log-path", e.logPath,
		// Flush the log file often so Logs() shows what just happened.
		"--file-flush-interval-msec", "100",
		"--admin-address-path", adminPath,
		// Hot restart is what uses shared memory keyed by base id; without it, any number of
		// Envoys run side by side with no base-id bookkeeping at all.
		"--disable-hot-restart",
		// Two cores shared by everyone: one worker is plenty for tests.
		"--concurrency", "1",
		"--service-node", "certdrift-test", "--service-cluster", "certdrift-test",
	}
	args = append(args, cfg.ExtraArgs...)
	stderr, err := os.Create(e.errPath)
	if err != nil {
		t.Fatalf("envoytest: %v", err)
	}
	e.cmd = exec.Command(bin.Path, args...)
	e.cmd.Dir = dir
	e.cmd.Stdout, e.cmd.Stderr = stderr, stderr
	// Own process group, so that a Ctrl-C on `go test` is not delivered twice and the cleanup
	// stays in charge of the shutdown order.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		stderr.Close()
		t.Fatalf("envoytest: start %s: %v", bin.Path, err)
	}
	go func() {
		e.exitErr = e.cmd.Wait()
		stderr.Close()
		close(e.exited)
	}()
	t.Cleanup(func() {
		e.Stop()
		if t.Failed() {
			t.Logf("envoytest: last lines of Envoy %s log (%s):\n%s", e.Binary.Version, e.logPath, logTail(e.Logs(), 40))
		}
	})

	timeout := cfg.ReadyTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	if err := e.waitReady(adminPath, timeout); err != nil {
		t.Fatalf("envoytest: Envoy %s (%s) did not become ready: %v\nlog tail:\n%s", bin.Version, bin.Path, err, logTail(e.Logs(), 40))
	}
	return e
}

func (e *Envoy) render(cfg Config) error {
	funcs := template.FuncMap{
		"port": func(name string) (int, error) {
			if p, ok := e.Ports[name]; ok {
				return p, nil
			}
			p, err := FreePort()
			if err != nil {
				return 0, err
			}
			e.Ports[name] = p
			return p, nil
		},
		"yamlstr": func(s string) (string, error) {
			b, err := json.Marshal(s)
			return string(b), err
		},
	}
	tmpl, err := template.New("bootstrap").Funcs(funcs).Option("missingkey=error").Parse(cfg.Bootstrap)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	params := Params{Dir: e.Dir, AdminSocket: "{address: 127.0.0.1, port_value: 0}", Data: cfg.Data}
	if err := tmpl.Execute(&buf, params); err != nil {
		return err
	}
	return os.WriteFile(e.ConfigPath, buf.Bytes(), 0o644)
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago. Prefer port 0 in the
// bootstrap where the port need not be known in advance: this one can be taken by someone else
// before Envoy binds it.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("allocate a loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (e *Envoy) waitReady(adminPath string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	var last error = errors.New("admin address file not written yet")
	for time.Now().Before(deadline) {
		select {
		case <-e.exited:
			return fmt.Errorf("envoy exited: %v", e.exitErr)
		default:
		}
		if e.AdminURL == "" {
			if b, err := os.ReadFile(adminPath); err == nil && len(bytes.TrimSpace(b)) > 0 {
				e.AdminURL = "http://" + strings.TrimSpace(string(b))
			}
		}
		if e.AdminURL != "" {
			resp, err := client.Get(e.AdminURL + "/ready")
			if err == nil {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
				last = fmt.Errorf("GET %s/ready: %s %q", e.AdminURL, resp.Status, strings.TrimSpace(string(body)))
			} else {
				last = err
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %w", timeout, last)
}

// Stop sends SIGTERM, then SIGKILL if Envoy has not exited within 5 seconds. Safe to call more
// than once; Start registers it with t.Cleanup.
func (e *Envoy) Stop() {
	select {
	case <-e.exited:
		return
	default:
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(5 * time.Second):
		_ = e.cmd.Process.Kill()
		<-e.exited
	}
}

// Kill ends Envoy with SIGKILL, whatever it is doing (an Envoy crashing or its pod killed mid-
// request), and waits for it to exit.
func (e *Envoy) Kill() {
	select {
	case <-e.exited:
		return
	default:
	}
	_ = e.cmd.Process.Kill()
	<-e.exited
}

// Exited reports whether the Envoy process has ended.
func (e *Envoy) Exited() bool {
	select {
	case <-e.exited:
		return true
	default:
		return false
	}
}

// Logs returns Envoy's log so far (its --log-path file, then anything it wrote to stderr), with
// private key material redacted.
func (e *Envoy) Logs() string {
	var b strings.Builder
	if data, err := os.ReadFile(e.logPath); err == nil {
		b.Write(data)
	}
	if data, err := os.ReadFile(e.errPath); err == nil && len(data) > 0 {
		b.WriteString("--- stderr ---\n")
		b.Write(data)
	}
	return Redacted(b.String())
}

// AdminGet fetches an admin path ("/certs", "/config_dump?include_eds") and returns the body,
// failing the test on any error or non-200 status.
func (e *Envoy) AdminGet(t TB, path string) []byte {
	t.Helper()
	body, err := e.adminGet(path)
	if err != nil {
		t.Fatalf("envoytest: %v", err)
	}
	return body
}

func (e *Envoy) adminGet(path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := e.AdminURL + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: read body: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, truncate(string(body), 300))
	}
	return body, nil
}

// startupListing matches the lines of Envoy's start-up inventory (extensions, header maps):
// one message continued over many lines indented by two spaces, useless when a test fails.
var startupListing = regexp.MustCompile(`^\[[^]]*\]\[[0-9]+\]\[info\]\[main\] \[[^]]*\]   `)

// logTail is the last n useful lines of an (already redacted) Envoy log, each at most 400 bytes.
func logTail(log string, n int) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if startupListing.MatchString(l) {
			continue
		}
		keep = append(keep, truncate(l, 400))
	}
	return tail(strings.Join(keep, "\n"), n)
}

// TB is the part of testing.TB this package uses. It is an interface of its own so that the
// quickstart demo (test/demo), which runs outside `go test`, can start Envoys too; *testing.T
// and *testing.B satisfy it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	TempDir() string
}
