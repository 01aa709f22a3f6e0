package testbed

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// childAttrs kills components when the process that started them dies (a test binary killed by
// its timeout), so no etcd or API server outlives its test. Start them with startChild.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// Pdeathsig fires when the OS thread that forked the child exits, not the process. The Go
// runtime retires a thread whose goroutine ends while locked to it — which the mount-namespace
// containers do on purpose (mountns_linux.go) — and such a thread may earlier have forked etcd,
// the API server or an Envoy from the shared pool: they were then killed at random (seen as an
// API server gone in the middle of a test). So every Pdeathsig child is forked by one goroutine
// locked to its thread for the life of the process, a thread the runtime never retires.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

// startChild is cmd.Start on the spawner thread.
func startChild(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnReqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}
