package connlimit_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/certdrift/certdrift/internal/connlimit"
)

func serve(t *testing.T, max int, h http.Handler) (string, *connlimit.Limiter) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := connlimit.New(max)
	srv := &http.Server{Handler: h, ConnState: lim.ConnState, ReadHeaderTimeout: time.Minute}
	go srv.Serve(lim.Listener(l))
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String(), lim
}

func waitOpen(t *testing.T, lim *connlimit.Limiter, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for lim.Stats().Open != want {
		if time.Now().After(deadline) {
			t.Fatalf("open connections %+v, want %d", lim.Stats(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleEvictedForNew: at the cap, idle connections (silent ones and keep-alive ones between
// requests) give way to a new request, which is answered.
func TestIdleEvictedForNew(t *testing.T) {
	addr, lim := serve(t, 4, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	for i := 0; i < 8; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i%2 == 0 { // a keep-alive request, then silence
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		}
	}
	waitOpen(t, lim, 4)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("request with the cap held by idle connections: %v", err)
	}
	resp.Body.Close()
	if s := lim.Stats(); s.Open > 4 || s.Evicted < 5 {
		t.Errorf("stats %+v: want at most 4 open and at least 5 evicted", s)
	}
}

// TestBusyNotEvicted: connections in the middle of a request keep their slot; a new connection
// when all are busy is closed.
func TestBusyNotEvicted(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	addr, lim := serve(t, 2, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "done")
	}))
	results := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/")
			if err == nil {
				resp.Body.Close()
			}
			results <- err
		}()
	}
	<-entered
	<-entered
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || n != 0 {
		t.Errorf("a third connection with both slots busy was kept (read %d, %v)", n, err)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if err := <-results; err != nil {
			t.Errorf("busy request cut: %v", err)
		}
	}
	if s := lim.Stats(); s.Refused < 1 || s.Evicted != 0 {
		t.Errorf("stats %+v: want a refusal and no eviction", s)
	}
}

// TestCloseDropsIdleKeepsBusy: at shutdown, silent connections are closed at once (Shutdown
// would wait for them) and new ones refused, while a request in progress finishes.
func TestCloseDropsIdleKeepsBusy(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	addr, lim := serve(t, 10, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "done")
	}))
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	result := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
		}
		result <- err
	}()
	<-entered
	waitOpen(t, lim, 2)
	lim.Close()
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Error("a silent connection survived Close")
	}
	close(release)
	if err := <-result; err != nil {
		t.Errorf("the request in progress was cut: %v", err)
	}
}
