package inventory

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestWaitSyncedNamesStalledAPIServer: an API server that accepts connections and never answers
// leaves no request error to quote; the error at the deadline still names the API server.
func TestWaitSyncedNamesStalledAPIServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	host := "http://" + l.Addr().String()
	inv := startInventory(t, &rest.Config{Host: host}, Options{Namespaces: []string{"a"}})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = inv.WaitSynced(ctx)
	if err == nil {
		t.Fatal("WaitSynced succeeded against an API server that never answers")
	}
	if !strings.Contains(err.Error(), "no answer from the API server "+host) {
		t.Errorf("error %q does not name the API server %s", err, host)
	}
}
