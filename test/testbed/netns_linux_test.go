package testbed

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// TestNetNS checks the private network namespace: a port bound inside is invisible on the
// host's loopback (the control case: the same address dialled from the host is refused) but
// reachable with Dial, and forwardIn makes a host port appear at the same address inside.
func TestNetNS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ns, err := newNetNS()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()

	var inside net.Listener
	if err := ns.do(func() error {
		var err error
		inside, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	go serveGreeting(inside, "inside")
	addr := inside.Addr().String()

	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		// Something on the host happens to hold the port (another package's test server, under
		// `go test ./...`): it may say nothing and keep the connection open, which is no failure;
		// only our listener's greeting is.
		c.SetDeadline(time.Now().Add(2 * time.Second))
		got, _ := io.ReadAll(c)
		c.Close()
		if string(got) == "inside" {
			t.Errorf("the namespace's listener %s answered on the host's loopback", addr)
		}
	}
	c, err := ns.Dial(ctx, addr)
	if err != nil {
		t.Fatalf("dial %s in the namespace: %v", addr, err)
	}
	if got := readAll(t, c); got != "inside" {
		t.Errorf("Dial %s in the namespace read %q, want %q", addr, got, "inside")
	}

	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go serveGreeting(host, "host")
	if err := ns.forwardIn(host.Addr().String(), host.Addr().String()); err != nil {
		t.Fatal(err)
	}
	c, err = ns.Dial(ctx, host.Addr().String())
	if err != nil {
		t.Fatalf("dial the forwarded %s in the namespace: %v", host.Addr(), err)
	}
	if got := readAll(t, c); got != "host" {
		t.Errorf("forwarded %s read %q, want %q", host.Addr(), got, "host")
	}
}

func serveGreeting(ln net.Listener, greeting string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.WriteString(c, greeting)
		c.Close()
	}
}

func readAll(t *testing.T, c net.Conn) string {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Errorf("read from %s: %v", c.RemoteAddr(), err)
	}
	return string(b)
}
