package envoyadmin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/probe/netbudget"
)

// A body is paid from the budget: with the budget held by others the read waits, then fails
// within its own deadline naming the budget; nothing stays held afterwards.
func TestFetchWaitsForBudget(t *testing.T) {
	srv := replay(t, "1.40.0", nil)
	b := netbudget.New(1 << 20)
	hog := b.Lease()
	if err := hog.Grow(context.Background(), b.Limit()); err != nil {
		t.Fatal(err)
	}
	c, err := New(srv.URL, Options{Timeout: 300 * time.Millisecond, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Snapshot(context.Background())
	for name, err := range map[string]error{"certs": s.CertsErr, "config": s.ConfigErr, "stats": s.StatsErr} {
		if !errors.Is(err, netbudget.ErrExhausted) {
			t.Errorf("%s under a spent budget: %v, want ErrExhausted", name, err)
		}
	}
	hog.Release()
	s = c.Snapshot(context.Background())
	if s.CertsErr != nil || s.ConfigErr != nil || len(s.Contexts) == 0 {
		t.Fatalf("with budget: certs %v, config %v, %d contexts", s.CertsErr, s.ConfigErr, len(s.Contexts))
	}
	if used, peak := b.Stats(); used != 0 || peak == 0 {
		t.Fatalf("after the reads: %d bytes held, peak %d; want 0 and > 0", used, peak)
	}
}

// An admin listing more contexts than MaxEntries keeps the first ones and says what it dropped.
func TestSnapshotTruncated(t *testing.T) {
	const n = 30
	var sb strings.Builder
	sb.WriteString(`{"certificates":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"ca_cert":[],"cert_chain":[{"path":"/c%d.pem","serial_number":"%x","expiration_time":"2030-01-01T00:00:00Z"}]}`, i, i+1)
	}
	sb.WriteString(`]}`)
	srv := replay(t, "1.40.0", map[string]http.HandlerFunc{"/certs": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, sb.String())
	}})
	c, err := New(srv.URL, Options{MaxEntries: 10})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Snapshot(context.Background())
	if len(s.Contexts) != 10 || !strings.Contains(s.Truncated, "30 /certs contexts") {
		t.Fatalf("%d contexts kept, Truncated %q; want 10 and a note naming 30 contexts", len(s.Contexts), s.Truncated)
	}
	if s.CertsErr != nil {
		t.Fatalf("CertsErr %v: truncation is not a read error", s.CertsErr)
	}
}

// Names an admin reports become labels and table cells: junk is replaced, never passed on.
func TestSnapshotCleansNames(t *testing.T) {
	long := strings.Repeat("n", 600)
	body := `{"certificates":[{"ca_cert":[],"cert_chain":[` +
		`{"path":"/ok.pem","serial_number":"0A","expiration_time":"2030-01-01T00:00:00Z"},` +
		`{"path":"/bad\u001b[2J.pem","serial_number":"not hex","expiration_time":"2030-01-01T00:00:00Z"},` +
		`{"path":"` + long + `","serial_number":"1","expiration_time":"2030-01-01T00:00:00Z"}]}]}`
	srv := replay(t, "1.40.0", map[string]http.HandlerFunc{"/certs": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}})
	c, _ := New(srv.URL, Options{})
	s := c.Snapshot(context.Background())
	if len(s.Contexts) != 1 || len(s.Contexts[0].Chain) != 3 {
		t.Fatalf("contexts %+v", s.Contexts)
	}
	ch := s.Contexts[0].Chain
	if ch[0].Path != "/ok.pem" || ch[0].SerialText != "0A" {
		t.Errorf("a clean entry changed: path %q serial %q", ch[0].Path, ch[0].SerialText)
	}
	if strings.ContainsRune(ch[1].Path, 0x1b) || !strings.HasPrefix(ch[1].Path, "invalid:") {
		t.Errorf("a path with a control character = %q, want it replaced", ch[1].Path)
	}
	if len(ch[2].Path) > maxText {
		t.Errorf("a %d-byte path kept at %d bytes, want at most %d", len(long), len(ch[2].Path), maxText)
	}
}

// One pool hands out one client per admin URL, and Retain forgets those no longer listed.
func TestTransportsReuse(t *testing.T) {
	var conns int
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns++
		}
	}
	srv.Start()
	defer srv.Close()
	var p Transports
	for range 20 {
		c, err := p.New(srv.URL, Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Certs(context.Background())
	}
	if conns > maxConnsPerHost {
		t.Fatalf("20 rounds opened %d connections, want at most %d", conns, maxConnsPerHost)
	}
	p.Retain(nil)
	if p.Len() != 0 {
		t.Fatalf("Retain(nil) kept %d clients", p.Len())
	}
}
