package envoyadmin

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The recorded Envoy reports uptime_current_epoch "1s" in /server_info. With a Memo, /server_info
// is read again only when /stats' server.uptime puts the process start elsewhere: a restart.
func TestMemoServerInfoOnlyOnRestart(t *testing.T) {
	var serverInfo atomic.Int32
	var uptime atomic.Int64
	uptime.Store(1)
	recorded := readTestdata(t, "real-1.40.0/stats_filtered.txt")
	srv := replay(t, "1.40.0", map[string]http.HandlerFunc{
		"/server_info": func(w http.ResponseWriter, r *http.Request) {
			serverInfo.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"version": "abc/1.40.0/Clean/RELEASE/BoringSSL", "uptime_current_epoch": "%ds"}`, uptime.Load())
		},
		"/stats": func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "server.uptime: %d\n", uptime.Load())
			w.Write(recorded)
		},
	})
	now := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	var memo Memo
	snap := func() (version string, start time.Time) {
		t.Helper()
		c, err := New(srv.URL, Options{Memo: &memo, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		s := c.Snapshot(context.Background())
		if s.ServerInfoErr != nil || s.StatsErr != nil {
			t.Fatalf("server_info: %v; stats: %v", s.ServerInfoErr, s.StatsErr)
		}
		return s.ServerVersion, s.ServerStart
	}
	for _, step := range []struct {
		name        string
		advance     time.Duration
		uptime      int64
		serverInfos int32
	}{
		{"FirstRead", 0, 1, 1},
		{"SameProcessLater", 10 * time.Second, 11, 1},
		{"SameProcessUptimeRoundedDown", 1500 * time.Millisecond, 12, 1},
		{"SameProcessUptimeNotFlushedYet", 4 * time.Second, 12, 1}, // the gauge lags by a flush interval
		{"Restarted", 5 * time.Second, 2, 2},                       // started 17 s after the first process: a new one
		{"RestartedProcessLater", 30 * time.Second, 32, 2},
		{"VersionReadAgainAfterMaxAge", serverInfoMaxAge, 32 + int64(serverInfoMaxAge/time.Second), 3},
		{"AndKeptAfterThat", 10 * time.Second, 42 + int64(serverInfoMaxAge/time.Second), 3},
	} {
		now = now.Add(step.advance)
		uptime.Store(step.uptime)
		version, start := snap()
		if got := serverInfo.Load(); got != step.serverInfos {
			t.Errorf("%s: /server_info read %d times in all, want %d", step.name, got, step.serverInfos)
		}
		if version != "1.40.0" {
			t.Errorf("%s: version %q", step.name, version)
		}
		if want := now.Add(-time.Duration(step.uptime) * time.Second).Truncate(time.Second); start.Sub(want).Abs() > maxUptimeLag+2*time.Second {
			t.Errorf("%s: ServerStart %v, want about %v", step.name, start, want)
		}
	}
}

// A Memo returns the parsed answer again only for the same bytes; a changed body is parsed.
func TestMemoParse(t *testing.T) {
	var m Memo
	calls := 0
	parse := func(b []byte) (any, error) {
		calls++
		if string(b) == "bad" {
			return nil, fmt.Errorf("bad body")
		}
		return string(b), nil
	}
	for _, step := range []struct {
		envoy, body string
		calls       int
	}{
		{"a", "one", 1}, {"a", "one", 1}, {"b", "one", 2}, {"a", "two", 3}, {"a", "two", 3},
		{"a", "bad", 4}, {"a", "bad", 5}, // errors are never kept
		{"a", "two", 5}, // a failed parse leaves the last good answer in place
	} {
		v, err := m.parse(step.envoy, "/certs", []byte(step.body), parse)
		if calls != step.calls {
			t.Errorf("%s %q: %d parse calls, want %d", step.envoy, step.body, calls, step.calls)
		}
		if err == nil && v != step.body {
			t.Errorf("%s %q: got %v", step.envoy, step.body, v)
		}
	}
	m.Retain([]string{"b"})
	if m.Len() != 1 {
		t.Errorf("after Retain(b): %d entries, want 1", m.Len())
	}
}
