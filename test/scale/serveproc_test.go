package scale

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/proc"
)

// servedProcess is a `certdrift serve` child started by startServe.
type servedProcess struct {
	cmd   *exec.Cmd
	base  string      // http://addr of its metrics port
	logs  *syncBuffer // its stdout and stderr
	ready time.Duration
	stop  func() // interrupt, then kill after 10 s; idempotent, also run when the test ends
}

// startServe starts `certdrift serve --kubeconfig kubeconfig --web.listen-address <free> args…`,
// stops it (interrupt, then kill after 10 s) when the test ends, printing its log's tail if the
// test failed, and waits up to readyWithin for /-/ready to answer 200: TestServeScale and
// TestServeRounds share it, so both measure readiness the same way.
func startServe(ctx context.Context, t *testing.T, bin, kubeconfig, mode string, readyWithin time.Duration, args ...string) *servedProcess {
	t.Helper()
	addr := proc.FreeAddr(t)
	sp := &servedProcess{base: "http://" + addr, logs: &syncBuffer{}}
	sp.cmd = exec.CommandContext(ctx, bin, append([]string{"serve", "--kubeconfig", kubeconfig, "--web.listen-address", addr}, args...)...)
	// GOGC and GOMEMLIMIT pass through, as TestInventoryScale passes them to its children, so that a
	// run can measure the GC's trade of CPU for memory.
	sp.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), SyncTimeoutEnv(mode),
		"GOGC=" + os.Getenv("GOGC"), "GOMEMLIMIT=" + os.Getenv("GOMEMLIMIT")}
	sp.cmd.Stdout, sp.cmd.Stderr = sp.logs, sp.logs
	started := time.Now()
	if err := sp.cmd.Start(); err != nil {
		t.Fatalf("start certdrift serve: %v", err)
	}
	sp.stop = sync.OnceFunc(func() {
		_ = sp.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = sp.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = sp.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("certdrift serve output (tail):\n%s", tail(sp.logs.String(), 3000))
		}
	})
	t.Cleanup(sp.stop)
	client := &http.Client{Timeout: 10 * time.Second}
	for {
		resp, err := client.Get(sp.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Since(started) > readyWithin || ctx.Err() != nil {
			t.Fatalf("certdrift serve not ready after %v", time.Since(started))
		}
		time.Sleep(20 * time.Millisecond)
	}
	sp.ready = time.Since(started)
	return sp
}
