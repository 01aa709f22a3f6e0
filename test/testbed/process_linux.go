package testbed

import "syscall"

// childAttrs kills components when the process that started them dies (a test binary killed by
// its timeout), so no etcd or API server outlives its test. Pdeathsig follows the OS thread that
// forked; Go rarely retires threads, and Stop covers the normal path anyway.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
