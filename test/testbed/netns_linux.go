package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// netNS is a private network namespace for a process the testbed runs on the host rather than
// as a pod (the Envoy Gateway control plane): what a pod's network namespace gives it in a
// cluster. Such a process binds fixed ports on all addresses (0.0.0.0:18000, :8081, ...); in the
// host's namespace those would collide with every pod on the machine listening on the same port
// (pod IPs are host loopback addresses here) and with a second testbed's control plane. Inside,
// it has a loopback interface of its own and nothing else.
//
// The testbed is the only way in or out, in both directions, as raw TCP relays (TLS stays end to
// end): forwardIn listens inside on an address the process expects (the API server's
// 127.0.0.1:<port>, so the kubeconfig is unchanged) and relays to the host, and Dial connects
// from the host to a port inside (the Service routing to the control plane uses it).
//
// A socket belongs to the namespace of the thread that created it, for life, so both are made on
// a locked OS thread switched into the namespace with setns and back (allowed for network
// namespaces in a multi-threaded process, unlike mount namespaces). Needs root (CAP_SYS_ADMIN).
type netNS struct {
	fd *os.File // keeps the namespace alive and is what setns takes

	mu        sync.Mutex
	listeners []net.Listener
	conns     map[net.Conn]bool // both ends of every open relay
	relays    sync.WaitGroup
}

// newNetNS creates a network namespace with its loopback interface up.
func newNetNS() (*netNS, error) {
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("open own network namespace: %w", err)}
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("create a network namespace (needs root or CAP_SYS_ADMIN): %w", err)}
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err == nil {
			err = loopbackUp()
		}
		// Back to the host's namespace before the thread may run anything else; a thread that
		// cannot go back stays locked, and the runtime discards it when this goroutine ends.
		if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); serr == nil {
			runtime.UnlockOSThread()
		} else if err == nil {
			err = fmt.Errorf("return to the host network namespace: %w", serr)
		}
		if err != nil && f != nil {
			f.Close()
			f = nil
		}
		done <- result{f: f, err: err}
	}()
	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	return &netNS{fd: r.f, conns: map[net.Conn]bool{}}, nil
}

// loopbackUp sets IFF_UP on "lo" in the calling thread's network namespace (a new namespace's
// loopback is down).
func loopbackUp() error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for ioctl: %w", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("read flags of lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// do runs fn on a thread switched into the namespace; sockets fn creates live there.
func (n *netNS) do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open own network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(n.fd.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace: %w", err)
	}
	ferr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime discards it rather than reuse it in the wrong
		// namespace.
		return errors.Join(ferr, fmt.Errorf("return to the host network namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// enter switches the calling, already locked, thread into the namespace for good: the thread
// that forks a process into it (startInNamespaces) is never returned to the runtime.
func (n *netNS) enter() error {
	if err := unix.Setns(int(n.fd.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter network namespace: %w", err)
	}
	return nil
}

// Dial connects from the host to addr inside the namespace.
func (n *netNS) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var conn net.Conn
	err := n.do(func() error {
		var err error
		conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
		return err
	})
	return conn, err
}

// forwardIn listens on addr inside the namespace and relays each connection to target on the
// host.
func (n *netNS) forwardIn(addr, target string) error {
	var ln net.Listener
	if err := n.do(func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return fmt.Errorf("listen on %s in the network namespace: %w", addr, err)
	}
	n.mu.Lock()
	n.listeners = append(n.listeners, ln)
	n.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			n.relays.Add(1)
			go func() {
				defer n.relays.Done()
				up, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					c.Close()
					return
				}
				if !n.track(c, up) {
					return
				}
				relay(c, up)
				n.untrack(c, up)
			}()
		}
	}()
	return nil
}

// track records an open relay's connections, or closes them if the namespace is closing.
func (n *netNS) track(cs ...net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		n.conns[c] = true
	}
	return true
}

func (n *netNS) untrack(cs ...net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range cs {
		delete(n.conns, c)
	}
}

// Close stops the relays (a watch the process left open would otherwise never end) and releases
// the namespace (the kernel frees it once no process is left in it).
func (n *netNS) Close() error {
	n.mu.Lock()
	for _, ln := range n.listeners {
		ln.Close()
	}
	n.listeners = nil
	for c := range n.conns {
		c.Close()
	}
	n.conns = nil
	n.mu.Unlock()
	n.relays.Wait()
	return n.fd.Close()
}

// relay copies both ways until both directions are done, then closes both connections.
func relay(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
	a.Close()
	b.Close()
}
