package cdbin

import (
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/proc"
)

// Serve is a running `certdrift serve` started by StartServe.
type Serve struct {
	Cmd  *exec.Cmd
	Addr string // host:port of the metrics listener
	Logs *proc.SyncBuffer
}

var servingRE = regexp.MustCompile(`msg="serving metrics" address=(\S+)`)

// StartServe runs bin's serve command on a loopback port and waits until it says where it
// listens. It is stopped with SIGTERM at the end of the test, and must then exit 0 within 15s.
func StartServe(t testing.TB, bin string, args ...string) *Serve {
	t.Helper()
	logs := &proc.SyncBuffer{}
	cmd := exec.Command(bin, append([]string{"serve", "--web.listen-address", "127.0.0.1:0"}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start certdrift serve: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("certdrift serve after SIGTERM: %v (want exit 0); logs:\n%s", err, logs.String())
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("certdrift serve did not stop within 15s of SIGTERM")
		}
	})
	s := &Serve{Cmd: cmd, Logs: logs}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("certdrift serve exited early: %v\n%s", err, logs.String())
		default:
		}
		if m := servingRE.FindStringSubmatch(logs.String()); m != nil {
			s.Addr = m[1]
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("certdrift serve did not say where it listens within 30s:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
