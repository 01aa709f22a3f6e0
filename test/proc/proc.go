// Package proc runs the helper processes of an end-to-end run (Prometheus, certdrift serve) for
// its lifetime: each logs to a file whose tail is shown when the run fails, and is killed when it
// ends. TB is the part of testing.TB it needs, so commands that stage a run outside `go test`
// (dashboards/render) use it too.
package proc

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// TB is the subset of testing.TB these helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
	Cleanup(func())
}

// Start runs bin with args until tb's cleanup; output goes to dir/<name>.log.
func Start(tb TB, dir, name, bin string, args ...string) {
	tb.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		tb.Fatalf("create %s log: %v", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s (%s): %v", name, bin, err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if tb.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			tb.Logf("--- end of %s log ---\n%s", name, b)
		}
	})
}

// WaitHTTP polls url until it answers 200 OK, failing tb after timeout.
func WaitHTTP(tb TB, url string, timeout time.Duration) {
	tb.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s not ready within %s (last: %v)", url, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// FreeAddr returns a loopback address nothing listens on right now.
func FreeAddr(tb TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// WriteFile writes body to path, readable by the owner only.
func WriteFile(tb TB, path, body string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		tb.Fatalf("write %s: %v", path, err)
	}
}

// SyncBuffer collects a process's output while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
