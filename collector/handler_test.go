package collector

import (
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestHandlerServesWhatTheRegistryHolds: the cached fast path and its gzip form carry exactly
// the lines promhttp renders from the collectors; other formats and scrapes before the first
// round go to the fallback.
func TestHandlerServesWhatTheRegistryHolds(t *testing.T) {
	s := NewStore(Options{Now: clock(t0.Add(time.Minute))})
	reg, err := s.Registry()
	if err != nil {
		t.Fatal(err)
	}
	fallback := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Fallback", "1")
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
	h, err := s.Handler(fallback, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(accept, encoding string) (*http.Response, string) {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		req.Header.Set("Accept-Encoding", encoding)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		resp := rec.Result()
		body := io.Reader(resp.Body)
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatalf("gzip: %v", err)
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatalf("read body: %v", err)
		}
		return resp, string(b)
	}
	if resp, _ := scrape("", "identity"); resp.Header.Get("X-Fallback") != "1" {
		t.Error("before the first round the fallback must serve")
	}
	for i, r := range []Round{kubeRound(t0, true), kubeRound(t0.Add(time.Second), false)} {
		s.Record(r)
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		// The cache leaves out empty label values, which Prometheus does not tell from absent
		// labels: the same series, compared as Prometheus would store them.
		want := string(dropEmptyLabels(rec.Body.Bytes()))
		for _, enc := range []string{"identity", "gzip"} {
			resp, got := scrape("text/plain;version=0.0.4", enc)
			if resp.Header.Get("X-Fallback") != "" {
				t.Errorf("round %d %s: served by the fallback, want the cache", i, enc)
			}
			if diff := cmp.Diff(sortedLines(want), sortedLines(got)); diff != "" {
				t.Errorf("round %d %s: fast path differs from promhttp (-promhttp +fast):\n%s", i, enc, diff)
			}
		}
		if resp, _ := scrape("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", "identity"); resp.Header.Get("X-Fallback") != "1" {
			t.Errorf("round %d: a protobuf scrape must go to the fallback", i)
		}
	}
}

func sortedLines(s string) []string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	slices.Sort(l)
	return l
}

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"": false, "gzip": true, "identity": false, "deflate, gzip;q=1.0, *;q=0.5": true, "gzip;q=0": false, "br": false,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept-Encoding", header)
		if got := acceptsGzip(r); got != want {
			t.Errorf("Accept-Encoding %q: %v, want %v", header, got, want)
		}
	}
}

func TestDropEmptyLabels(t *testing.T) {
	cases := map[string]struct {
		in, want string
	}{
		"NoLabels":     {in: "a 1\n", want: "a 1\n"},
		"Comment":      {in: "# HELP a x=\"\"\n", want: "# HELP a x=\"\"\n"},
		"NoneEmpty":    {in: "a{b=\"1\",c=\"2\"} 1\n", want: "a{b=\"1\",c=\"2\"} 1\n"},
		"FirstEmpty":   {in: "a{b=\"\",c=\"2\"} 1\n", want: "a{c=\"2\"} 1\n"},
		"MiddleEmpty":  {in: "a{b=\"1\",c=\"\",d=\"3\"} 1\n", want: "a{b=\"1\",d=\"3\"} 1\n"},
		"LastEmpty":    {in: "a{b=\"1\",c=\"\"} 1\n", want: "a{b=\"1\"} 1\n"},
		"AllEmpty":     {in: "a{b=\"\",c=\"\"} 1\n", want: "a 1\n"},
		"EscapedValue": {in: "a{b=\"x\\\"=\\\"\\\"\",c=\"\"} 1\n", want: "a{b=\"x\\\"=\\\"\\\"\"} 1\n"},
		"CommaInValue": {in: "a{b=\"x,y=\",c=\"\"} 1\n", want: "a{b=\"x,y=\"} 1\n"},
		"NoNewline":    {in: "a{b=\"\"} 1", want: "a 1"},
		"Broken":       {in: "a{b=\"\" 1\n", want: "a{b=\"\" 1\n"},
		"TwoLines":     {in: "a{b=\"\"} 1\nc{d=\"e\",f=\"\"} 2\n", want: "a 1\nc{d=\"e\"} 2\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, string(dropEmptyLabels([]byte(tc.in)))); diff != "" {
				t.Errorf("dropEmptyLabels(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}
