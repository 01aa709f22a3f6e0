package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// bindMount is a node directory that must appear at a fixed path inside a container.
type bindMount struct{ source, target string }

// startInMountNamespace starts cmd in a new mount namespace in which every bind's source is
// bind-mounted read-only at its target, and returns the channel that receives cmd.Wait's result.
//
// The namespace is made on one locked OS thread (unshare(CLONE_NEWNS) affects only the calling
// thread), the child is forked from that thread and so inherits it, and the goroutine stays on
// the thread until the child exits: the thread's namespace is not the process's, so it must
// never run other goroutines, and Pdeathsig (childAttrs) fires when the forking thread dies, so
// the thread must outlive the child. Returning while locked makes the runtime discard the
// thread, which is why every other child is forked on the spawner thread (startChild). The host
// only ever gets the (empty) mount point directories.
func startInMountNamespace(cmd *exec.Cmd, binds []bindMount) (<-chan error, error) {
	return startInNamespaces(cmd, binds, nil)
}

// startInNamespaces is startInMountNamespace with the child also in the network namespace ns
// (when not nil), entered by the same thread before the mount namespace is made.
func startInNamespaces(cmd *exec.Cmd, binds []bindMount, ns *netNS) (<-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if ns != nil {
			if err := ns.enter(); err != nil {
				started <- err
				return
			}
		}
		if err := enterMountNamespace(binds); err != nil {
			started <- err
			return
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

func enterMountNamespace(binds []bindMount) error {
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return fmt.Errorf("create a mount namespace (needs root or CAP_SYS_ADMIN): %w", err)
	}
	// Private propagation: the binds below must not leak back into the host's namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private in the new mount namespace: %w", err)
	}
	for _, b := range binds {
		if err := os.MkdirAll(b.target, 0o755); err != nil {
			return fmt.Errorf("create mount point %s: %w", b.target, err)
		}
		if err := syscall.Mount(b.source, b.target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s at %s: %w", b.source, b.target, err)
		}
		if err := syscall.Mount("", b.target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", b.target, err)
		}
	}
	return nil
}
