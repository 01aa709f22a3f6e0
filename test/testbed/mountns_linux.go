package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
)

// bindMount is a node directory or file that must appear at a fixed path inside a container.
type bindMount struct {
	source, target string
	readOnly       bool
}

// startInMountNamespace starts cmd in a new mount namespace in which every bind's source is
// bind-mounted at its target, and returns the channel that receives cmd.Wait's result.
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

// enterMountNamespace makes a private mount namespace for the calling (locked) thread and binds
// each source at its target. Binds are made shallowest target first, as container runtimes order
// them, so that a mount inside another mount's directory (/etc/envoy/tls under /etc/envoy) lands
// on top of it; its mount point is then created in that directory, which for a volume is the
// node's volume directory, as with a real runtime. The read-only remounts come after every bind,
// so that such mount points can still be created. A file source (a subPath naming a file) gets a
// file mount point. Mount points missing on the host are created there (empty), as the host
// shares its file system with the namespace.
func enterMountNamespace(binds []bindMount) error {
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return fmt.Errorf("create a mount namespace (needs root or CAP_SYS_ADMIN): %w", err)
	}
	// Private propagation: the binds below must not leak back into the host's namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private in the new mount namespace: %w", err)
	}
	ordered := slices.Clone(binds)
	slices.SortStableFunc(ordered, func(a, b bindMount) int { return depth(a.target) - depth(b.target) })
	for _, b := range ordered {
		if err := mountPoint(b.source, b.target); err != nil {
			return err
		}
		if err := syscall.Mount(b.source, b.target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s at %s: %w", b.source, b.target, err)
		}
	}
	for _, b := range ordered {
		if !b.readOnly {
			continue
		}
		if err := syscall.Mount("", b.target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", b.target, err)
		}
	}
	return nil
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

// mountPoint makes sure target exists with the kind of source: a directory, or a file.
func mountPoint(source, target string) error {
	fi, err := os.Stat(source)
	if err != nil {
		return fmt.Errorf("bind source %s: %w", source, err)
	}
	if fi.IsDir() {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("create mount point %s: %w", target, err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return fmt.Errorf("create mount point %s: %w", target, err)
	}
	if tf, err := os.Stat(target); err == nil {
		if tf.IsDir() {
			return fmt.Errorf("mount point %s is a directory, but %s is a file", target, source)
		}
		return nil
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("create mount point %s: %w", target, err)
	}
	return f.Close()
}
