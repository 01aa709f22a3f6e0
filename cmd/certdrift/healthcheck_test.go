package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/cdbin"
)

// TestHealthcheckServe: against a real certdrift serve, healthcheck exits 0 once the first round
// is done (polled: readiness is the server's, not a sleep).
func TestHealthcheckServe(t *testing.T) {
	cfg := writeConfig(t, "desired: [{name: a, dir: "+t.TempDir()+"}]\n")
	s := cdbin.StartServe(t, binary, "--config", cfg, "--interval", "1s")
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := certdrift(t, nil, "healthcheck", "--timeout", "5s", s.Addr)
		if r.code == codeClean {
			if !strings.Contains(r.stdout, "ok:") {
				t.Errorf("exit 0 without saying ok:\n%s", r)
			}
			return
		}
		if r.code != codeFindings {
			t.Fatalf("healthcheck of a running serve: want exit 0 or (not ready yet) 1\n%s", r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthcheck never passed against serve at %s:\n%s\nserve log:\n%s", s.Addr, r, s.Logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHealthcheckFails: each way the check must fail, against servers that are not a ready
// certdrift, and a bad address as a usage error.
func TestHealthcheckFails(t *testing.T) {
	const expo = "# TYPE certdrift_build_info gauge\ncertdrift_build_info{version=\"x\"} 1\n"
	cases := map[string]struct {
		reason  string
		handler http.HandlerFunc
		want    string
	}{
		"NotReady": {
			reason: "a 503 from /-/ready (first round not done) fails",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/-/ready" {
					http.Error(w, "not ready", http.StatusServiceUnavailable)
					return
				}
				fmt.Fprint(w, expo)
			},
			want: "status 503",
		},
		"MetricsError": {
			reason: "a failing /metrics fails even when ready",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/metrics" {
					http.Error(w, "boom", http.StatusInternalServerError)
					return
				}
				fmt.Fprintln(w, "ready")
			},
			want: "status 500",
		},
		"NotCertdrift": {
			reason: "a 200 /metrics without certdrift_build_info is something else answering",
			handler: func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, "# TYPE up gauge\nup 1\ncertdrift_build_info_other 1\n")
			},
			want: "no certdrift_build_info",
		},
		"Redirect": {
			reason: "a redirect is not followed",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "http://example.invalid/", http.StatusFound)
			},
			want: "status 302",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			r := certdrift(t, nil, "healthcheck", strings.TrimPrefix(srv.URL, "http://"))
			if r.code != codeFindings {
				t.Fatalf("%s: want exit %d\n%s", tc.reason, codeFindings, r)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%s: stderr does not say %q\n%s", tc.reason, tc.want, r)
			}
		})
	}
	t.Run("BadAddress", func(t *testing.T) {
		r := certdrift(t, nil, "healthcheck", "http://localhost:9809/metrics")
		if r.code != codeNoRun || !strings.Contains(r.stderr, "HOST:PORT") {
			t.Errorf("a URL instead of HOST:PORT: want exit %d naming HOST:PORT\n%s", codeNoRun, r)
		}
	})
}
