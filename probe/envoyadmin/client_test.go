package envoyadmin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/certdrift/certdrift/probe/envoystate"
)

// replay serves the recorded outputs of one real Envoy as its admin would, honouring the masks.
func replay(t *testing.T, version string, overrides map[string]http.HandlerFunc) *httptest.Server {
	t.Helper()
	files := map[string]string{
		"/certs":       "certs.json",
		"/server_info": "server_info.json",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := overrides[r.URL.Path]; ok {
			h(w, r)
			return
		}
		name := files[r.URL.Path]
		switch r.URL.Path {
		case "/config_dump":
			switch r.URL.Query().Get("mask") {
			case "":
				name = "config_dump.json"
			case "static_secrets,dynamic_active_secrets,dynamic_warming_secrets":
				name = "config_dump_mask_secrets.json"
			case "static_listeners,dynamic_listeners":
				name = "config_dump_mask_listeners.json"
			default:
				http.Error(w, "FieldMask could not be successfully applied", http.StatusBadRequest)
				return
			}
		case "/stats":
			name = "stats.txt"
			if r.URL.Query().Get("filter") == statsFilter {
				name = "stats_filtered.txt"
			}
		}
		if name == "" {
			http.NotFound(w, r)
			return
		}
		if strings.HasSuffix(name, ".json") {
			w.Header().Set("Content-Type", "application/json")
		}
		w.Write(readTestdata(t, "real-"+version+"/"+name))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSnapshotReplay(t *testing.T) {
	for _, v := range realVersions {
		t.Run(v, func(t *testing.T) {
			srv := replay(t, v, nil)
			now := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
			c, err := New(srv.URL+"/", Options{Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			s := c.Snapshot(context.Background())
			for what, err := range map[string]error{"certs": s.CertsErr, "config": s.ConfigErr, "stats": s.StatsErr, "server_info": s.ServerInfoErr} {
				if err != nil {
					t.Errorf("%s: %v", what, err)
				}
			}
			if s.ServerVersion != v {
				t.Errorf("ServerVersion = %q, want %q", s.ServerVersion, v)
			}
			if s.ServerStart.IsZero() || !s.ServerStart.Before(now) || now.Sub(s.ServerStart) > time.Minute {
				t.Errorf("ServerStart = %v, want shortly before %v", s.ServerStart, now)
			}
			if len(s.Contexts) != 3 || len(s.Secrets) != 3 || len(s.Listeners) != 3 || len(s.ConfigSkipped) != 0 {
				t.Errorf("got %d contexts, %d secrets, %d filter chains, skipped %v; want 3, 3, 3, none",
					len(s.Contexts), len(s.Secrets), len(s.Listeners), s.ConfigSkipped)
			}
			if _, ok := s.Stats.KeyRotationFailed()[envoystate.SanitizeStatName("kubernetes://default/sds-cert")]; !ok {
				t.Errorf("no key_rotation_failed counter for the SDS secret in %v", s.Stats.Counters)
			}
			if !s.CollectedAt.Equal(now) || s.AdminURL != srv.URL {
				t.Errorf("CollectedAt %v AdminURL %q", s.CollectedAt, s.AdminURL)
			}
		})
	}
}

func TestSnapshotMaskRejectedFallsBackToPlainDump(t *testing.T) {
	var plain atomic.Int32
	srv := replay(t, "1.40.0", map[string]http.HandlerFunc{
		"/config_dump": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("mask") != "" {
				http.Error(w, "FieldMask could not be successfully applied to any configs.", http.StatusBadRequest)
				return
			}
			plain.Add(1)
			w.Write(readTestdata(t, "real-1.40.0/config_dump.json"))
		},
		"/stats": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("filter") != "" {
				http.Error(w, "Invalid re2 regex", http.StatusBadRequest)
				return
			}
			w.Write(readTestdata(t, "real-1.40.0/stats.txt"))
		},
	})
	c, _ := New(srv.URL, Options{})
	s := c.Snapshot(context.Background())
	if s.ConfigErr != nil || s.StatsErr != nil {
		t.Fatalf("ConfigErr %v, StatsErr %v", s.ConfigErr, s.StatsErr)
	}
	if len(s.Secrets) != 3 || len(s.Listeners) != 3 {
		t.Errorf("got %d secrets and %d filter chains from the plain dump, want 3 and 3", len(s.Secrets), len(s.Listeners))
	}
	if n := plain.Load(); n != 1 {
		t.Errorf("plain /config_dump fetched %d times, want once for both parts", n)
	}
	if _, ok := s.Stats.DaysUntilFirstCertExpiring(); !ok {
		t.Error("no days_until_first_cert_expiring from the unfiltered /stats")
	}
}

func TestSnapshotMaskIgnoredNoDuplicates(t *testing.T) {
	// An Envoy that does not know ?mask= sends the whole dump to both requests.
	srv := replay(t, "1.36.2", map[string]http.HandlerFunc{
		"/config_dump": func(w http.ResponseWriter, r *http.Request) {
			w.Write(readTestdata(t, "real-1.36.2/config_dump.json"))
		},
	})
	c, _ := New(srv.URL, Options{})
	s := c.Snapshot(context.Background())
	if s.ConfigErr != nil || len(s.Secrets) != 3 || len(s.Listeners) != 3 {
		t.Errorf("ConfigErr %v, %d secrets, %d filter chains; want nil, 3, 3 (no duplicates)", s.ConfigErr, len(s.Secrets), len(s.Listeners))
	}
}

// hostile is a handler for every admin path.
func hostileServer(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestSnapshotHostileServers(t *testing.T) {
	const timeout = 300 * time.Millisecond
	cases := map[string]struct {
		handler http.HandlerFunc
		maxBody int64
		// each must appear in CertsErr, ConfigErr and StatsErr (or be matched by wantIs)
		want   []string
		wantIs error
	}{
		"HTML": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				io.WriteString(w, "<html><body>Welcome to nginx</body></html>")
			},
			want: []string{"/certs", "Content-Type \"text/html\""}, wantIs: ErrNotJSON,
		},
		"HTMLWithoutContentType": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				io.WriteString(w, "<!DOCTYPE html><html>")
			},
			want: []string{"body starts with \"<!DOCTYPE html><html>\""}, wantIs: ErrNotJSON,
		},
		"Status500": {
			handler: func(w http.ResponseWriter, r *http.Request) { http.Error(w, "upstream exploded", 500) },
			want:    []string{"HTTP 500", "upstream exploded"},
		},
		"Status404OldEnvoy": {
			handler: func(w http.ResponseWriter, r *http.Request) { http.Error(w, "invalid path. admin commands are:", 404) },
			want:    []string{"HTTP 404", "endpoint missing"},
		},
		"FiftyMegabytes": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				chunk := []byte("{" + strings.Repeat(" ", 64<<10-1))
				for i := 0; i < 50<<20/len(chunk); i++ {
					if _, err := w.Write(chunk); err != nil {
						return // the client hung up, as it should
					}
					chunk[0] = ' '
				}
			},
			maxBody: 1 << 20,
			want:    []string{"more than 1048576 bytes"}, wantIs: ErrBodyTooLarge,
		},
		"DeclaredFiftyMegabytes": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "52428800")
				w.Write([]byte("{"))
			},
			maxBody: 1 << 20,
			want:    []string{"Content-Length 52428800"}, wantIs: ErrBodyTooLarge,
		},
		"Trickle": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				for {
					if _, err := w.Write([]byte(" ")); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			},
			want: []string{"no complete answer within the admin read's 300ms budget"}, wantIs: context.DeadlineExceeded,
		},
		"NoHeaders": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			},
			want: []string{"request: no complete answer within the admin read's 300ms budget"}, wantIs: context.DeadlineExceeded,
		},
		"InvalidJSON": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"certificates": [{"ca_cert": [}`+"\nnot: stats\n")
			},
			want: []string{"invalid JSON at byte"},
		},
		"WrongJSONShape": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"items": [1, 2, 3]}`)
			},
			want: []string{"unexpected JSON shape"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := hostileServer(t, tc.handler)
			c, err := New(url, Options{Timeout: timeout, MaxBodyBytes: tc.maxBody})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			s := c.Snapshot(context.Background())
			// One budget for the whole read (TestSnapshotHungAdminOneBudget checks it closely).
			if d := time.Since(start); d > timeout+2*time.Second {
				t.Errorf("Snapshot took %v, want it bounded by the timeout %v", d, timeout)
			}
			t.Logf("certs: %v\nconfig: %v\nstats: %v", s.CertsErr, s.ConfigErr, s.StatsErr)
			for part, err := range map[string]error{"certs": s.CertsErr, "config": s.ConfigErr} {
				if err == nil {
					t.Errorf("%s: no error", part)
					continue
				}
				// The audit prints "Envoy admin <url>: <err>": the error names the request by
				// its path, and the URL not at all.
				if strings.Contains(err.Error(), url) || !strings.HasPrefix(err.Error(), "GET /") && !strings.HasPrefix(err.Error(), "parse /certs") {
					t.Errorf("%s: error %q, want it to start \"GET /\" (or \"parse /certs\") and not repeat %s", part, err, url)
				}
				if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
					t.Errorf("%s: error %q is not %v", part, err, tc.wantIs)
				}
			}
			if !strings.Contains(s.CertsErr.Error(), tc.want[0]) {
				t.Errorf("certs error %q, want it to contain %q", s.CertsErr, tc.want[0])
			}
			for _, w := range tc.want[1:] {
				if !strings.Contains(s.CertsErr.Error(), w) {
					t.Errorf("certs error %q, want it to contain %q", s.CertsErr, w)
				}
			}
			// /stats is text: HTML and JSON bodies are not "name: value" lines either.
			if s.StatsErr == nil && name != "HTML" && name != "HTMLWithoutContentType" && name != "WrongJSONShape" && name != "InvalidJSON" {
				t.Errorf("stats: no error")
			}
			if len(s.Contexts)+len(s.Secrets)+len(s.Listeners) != 0 {
				t.Errorf("data from a hostile server: %d contexts, %d secrets, %d chains", len(s.Contexts), len(s.Secrets), len(s.Listeners))
			}
		})
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for name, u := range map[string]string{
		"NoScheme": "127.0.0.1:15000", "FTP": "ftp://h/", "NoHost": "http://", "Query": "http://h/?x=1", "Junk": "http://[::1",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(u, Options{}); err == nil {
				t.Errorf("New(%q) accepted it", u)
			}
		})
	}
}

func TestErrorBodyNeverEchoesKeys(t *testing.T) {
	url := hostileServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----", 500)
	})
	c, _ := New(url, Options{})
	s := c.Snapshot(context.Background())
	for _, err := range []error{s.CertsErr, s.ConfigErr, s.StatsErr, s.ServerInfoErr} {
		if err == nil || strings.Contains(err.Error(), "MIIE") || strings.Contains(err.Error(), "BEGIN PRIVATE") {
			t.Errorf("error %q: want an error that withholds the body", err)
		}
	}
}

// TestSnapshotHungAdminOneBudget: an admin that accepts and never answers costs one Timeout for
// the whole Snapshot, though the two masked /config_dump requests run one after the other.
func TestSnapshotHungAdminOneBudget(t *testing.T) {
	const timeout = time.Second
	var requests atomic.Int32
	url := hostileServer(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		<-r.Context().Done()
	})
	c, err := New(url, Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s := c.Snapshot(context.Background())
	d := time.Since(start)
	if d < timeout || d > timeout*17/10 {
		t.Errorf("Snapshot of a hung admin took %v, want about one timeout (%v), not one per request", d, timeout)
	}
	for part, err := range map[string]error{"certs": s.CertsErr, "config": s.ConfigErr, "stats": s.StatsErr, "server_info": s.ServerInfoErr} {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: error %v, want a deadline", part, err)
		}
	}
	if !strings.Contains(s.ConfigErr.Error(), "not sent") {
		t.Errorf("config error %q, want the second masked request said not sent", s.ConfigErr)
	}
	if n := requests.Load(); n != 4 {
		t.Errorf("%d requests reached the admin, want 4 (certs, one config_dump, stats, server_info)", n)
	}
}

// TestMaskRejectedOnePlainFetch: a 400 on the masks leads to one plain /config_dump whatever it
// answers, and once it has answered no second masked request is made.
func TestMaskRejectedOnePlainFetch(t *testing.T) {
	for name, tc := range map[string]struct {
		plainStatus int
		wantMasked  int32
	}{
		"PlainAnswers": {plainStatus: http.StatusOK, wantMasked: 1},
		// The listeners mask is still tried: it may answer where the plain dump did not.
		"PlainFails": {plainStatus: http.StatusServiceUnavailable, wantMasked: 2},
	} {
		t.Run(name, func(t *testing.T) {
			var plain, masked atomic.Int32
			srv := replay(t, "1.40.0", map[string]http.HandlerFunc{
				"/config_dump": func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Query().Get("mask") != "" {
						masked.Add(1)
						http.Error(w, "FieldMask could not be successfully applied to any configs.", http.StatusBadRequest)
						return
					}
					plain.Add(1)
					if tc.plainStatus != http.StatusOK {
						http.Error(w, "overloaded", tc.plainStatus)
						return
					}
					w.Write(readTestdata(t, "real-1.40.0/config_dump.json"))
				},
			})
			c, _ := New(srv.URL, Options{})
			s := c.Snapshot(context.Background())
			if n := plain.Load(); n != 1 {
				t.Errorf("plain /config_dump fetched %d times, want once", n)
			}
			if n := masked.Load(); n != tc.wantMasked {
				t.Errorf("%d masked requests, want %d", n, tc.wantMasked)
			}
			if tc.plainStatus == http.StatusOK {
				if s.ConfigErr != nil || len(s.Secrets) != 3 || len(s.Listeners) != 3 {
					t.Errorf("ConfigErr %v, %d secrets, %d chains; want nil, 3, 3", s.ConfigErr, len(s.Secrets), len(s.Listeners))
				}
				return
			}
			if s.ConfigErr == nil || strings.Count(s.ConfigErr.Error(), "HTTP 503") != 1 {
				t.Errorf("ConfigErr %v, want the plain dump's 503 once", s.ConfigErr)
			}
		})
	}
}

// TestErrorBodyText: what a server says in an error body is shown as the text it is: valid UTF-8
// as is, bytes that are not UTF-8 and control or bidi characters escaped, a character never cut.
func TestErrorBodyText(t *testing.T) {
	cases := map[string]struct {
		body, want string
	}{
		"UTF8":         {body: "Zertifikat ungültig: 証明書", want: "Zertifikat ungültig: 証明書"},
		"Latin1":       {body: "ung\xfcltig", want: `ung\xfcltig`},
		"Controls":     {body: "a\x1b[31mred\x00b\nc", want: `a\x1b[31mred\x00b c`},
		"BidiOverride": {body: "abc\u202edcba", want: `abc\xe2\x80\xaedcba`},
		"CutCharacter": {body: strings.Repeat("a", 199) + "ü and more", want: strings.Repeat("a", 199)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			url := hostileServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, tc.body)
			})
			c, _ := New(url, Options{})
			_, err := c.Certs(context.Background())
			var se *StatusError
			if !errors.As(err, &se) {
				t.Fatalf("error %v, want a StatusError", err)
			}
			if se.Body != tc.want {
				t.Errorf("Body = %q, want %q", se.Body, tc.want)
			}
			if want := "GET /certs: HTTP 503 Service Unavailable: " + tc.want; err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
		})
	}
}

// TestRedirectsNotFollowed: a 3xx is an error naming where it pointed; the client never asks the
// other host, never quotes the redirecting body, and the caller's client keeps its own policy.
func TestRedirectsNotFollowed(t *testing.T) {
	var foreign atomic.Int32
	other := hostileServer(t, func(w http.ResponseWriter, r *http.Request) {
		foreign.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"certificates": []}`)
	})
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			url := hostileServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", other+r.URL.Path)
				w.WriteHeader(code)
				io.WriteString(w, "foreign body text")
			})
			mine := &http.Client{}
			c, err := New(url, Options{HTTPClient: mine})
			if err != nil {
				t.Fatal(err)
			}
			s := c.Snapshot(context.Background())
			for part, err := range map[string]error{"certs": s.CertsErr, "config": s.ConfigErr, "stats": s.StatsErr, "server_info": s.ServerInfoErr} {
				var se *StatusError
				if !errors.As(err, &se) || se.Code != code || se.Location != other+se.URL[:strings.IndexAny(se.URL+"?", "?")] {
					t.Errorf("%s: error %v, want a StatusError %d with the Location", part, err, code)
					continue
				}
				if !strings.Contains(err.Error(), "redirect to \""+other) || strings.Contains(err.Error(), "foreign body") {
					t.Errorf("%s: error %q, want the Location named and the body not quoted", part, err)
				}
			}
			if n := foreign.Load(); n != 0 {
				t.Errorf("the other host got %d requests, want none", n)
			}
			if mine.CheckRedirect != nil {
				t.Error("the caller's client was changed")
			}
		})
	}
}
