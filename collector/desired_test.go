package collector

import (
	"bytes"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/files"
)

// TestUpdateDesired: inventory changes reach the exposition between rounds — an updated Secret's
// new fingerprint, a deleted Secret's series gone, a new Secret's series there — and the spliced
// text holds exactly what promhttp renders from the new snapshot, while the text a scrape already
// holds is never modified. A round that started before an update does not undo it.
func TestUpdateDesired(t *testing.T) {
	s := NewStore(Options{Now: clock(t0.Add(time.Minute))})
	reg, err := s.Registry()
	if err != nil {
		t.Fatal(err)
	}
	fallback := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a plain-text scrape after the first round went to the fallback")
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
	h, err := s.Handler(fallback, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept", "text/plain;version=0.0.4")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Result().Body)
		return string(b)
	}
	want := func() string {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return string(dropEmptyLabels(rec.Body.Bytes()))
	}
	obs := func(name string, c *x509.Certificate) files.Observation {
		return files.Observation{Source: files.Source{Name: name}, Items: []files.Item{{Chain: []*x509.Certificate{c}}}}
	}

	s.Record(kubeRound(t0, true))
	before := s.cachedText()
	held := bytes.Clone(before.plain)

	a2, c := cert("a2", 50), cert("c", 60)
	upd := t0.Add(10 * time.Second)
	s.UpdateDesired([]DesiredUpdate{
		{Observation: obs("ns-a/tls-a", a2)},
		{Observation: obs("ns-b/tls-b", nil), Deleted: true},
		{Observation: obs("ns-c/tls-c", c)},
	}, upd)
	if !bytes.Equal(before.plain, held) {
		t.Error("UpdateDesired modified the text of the previous snapshot")
	}
	got := scrape()
	if diff := cmp.Diff(sortedLines(want()), sortedLines(got)); diff != "" {
		t.Errorf("spliced text differs from promhttp over the new snapshot (-promhttp +fast):\n%s", diff)
	}
	for _, tc := range []struct {
		name, source, want string
	}{
		{name: "Updated", source: "ns-a/tls-a", want: pki.Fingerprint(a2)},
		{name: "Deleted", source: "ns-b/tls-b", want: ""},
		{name: "Added", source: "ns-c/tls-c", want: pki.Fingerprint(c)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if fp := desiredFP(got, tc.source); fp != tc.want {
				t.Errorf("desired fingerprint of %s = %q, want %q", tc.source, fp, tc.want)
			}
		})
	}
	if strings.Contains(got, `source="ns-b/tls-b"`) && strings.Contains(got, `view="desired"`) && desiredFP(got, "ns-b/tls-b") != "" {
		t.Error("deleted Secret still has desired series")
	}

	// A round that began before the update read the old Secret: the update stays.
	stale := kubeRound(upd.Add(time.Second), true)
	stale.Started = upd.Add(-time.Second)
	s.Record(stale)
	if fp := desiredFP(scrape(), "ns-a/tls-a"); fp != pki.Fingerprint(a2) {
		t.Errorf("after a round started before the update: fingerprint %q, want the update's %q", fp, pki.Fingerprint(a2))
	}
	if diff := cmp.Diff(sortedLines(want()), sortedLines(scrape())); diff != "" {
		t.Errorf("after the round: fast path differs from promhttp (-promhttp +fast):\n%s", diff)
	}
	// A round that began after it read the new state itself: the override is dropped.
	fresh := kubeRound(upd.Add(3*time.Second), true)
	s.Record(fresh)
	if fp := desiredFP(scrape(), "ns-a/tls-a"); fp != pki.Fingerprint(cert("a", 30)) {
		t.Errorf("after a round started after the update: fingerprint %q, want the round's", fp)
	}
}

// TestUpdateDesiredBeforeFirstRound: nothing is exposed before the first round; the update waits
// for it and is applied if the round may have missed it.
func TestUpdateDesiredBeforeFirstRound(t *testing.T) {
	s := NewStore(Options{Now: clock(t0)})
	a2 := cert("a2", 50)
	s.UpdateDesired([]DesiredUpdate{{Observation: files.Observation{Source: files.Source{Name: "ns-a/tls-a"},
		Items: []files.Item{{Chain: []*x509.Certificate{a2}}}}}}, t0.Add(500*time.Millisecond))
	if s.Ready() {
		t.Fatal("ready before the first round")
	}
	s.Record(kubeRound(t0.Add(time.Second), false)) // started at t0, before the update: may have missed it
	tc := s.cachedText()
	if tc == nil {
		t.Fatal("no cached text after the first round")
	}
	if fp := desiredFP(string(tc.plain), "ns-a/tls-a"); fp != pki.Fingerprint(a2) {
		t.Errorf("fingerprint %q, want the update's %q", fp, pki.Fingerprint(a2))
	}
}

func TestDesiredLineOf(t *testing.T) {
	cut := map[string]bool{"ns/a": true, `we\"ird`: true}
	for _, tc := range []struct {
		name, line string
		want       bool
	}{
		{name: "Desired", line: `certdrift_certificate_info{fingerprint_sha256="x",source="ns/a",view="desired"} 1`, want: true},
		{name: "Loaded", line: `certdrift_certificate_info{envoy="ns/gw",source="ns/a",view="loaded"} 1`},
		{name: "OtherSource", line: `certdrift_certificate_info{source="ns/ab",view="desired"} 1`},
		{name: "MergedItem", line: `certdrift_certificate_info{source="ns/a#x",view="desired"} 1`},
		{name: "SourceInsideValue", line: `certdrift_certificate_info{subject="CN=x,source=\"ns/a\"",source="ns/b",view="desired"} 1`},
		{name: "EscapedQuote", line: `certdrift_certificate_info{source="we\"ird",view="desired"} 1`, want: true},
		{name: "NoLabels", line: `certdrift_rounds_total 3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := desiredLineOf([]byte(tc.line), cut); got != tc.want {
				t.Errorf("desiredLineOf(%s) = %v, want %v", tc.line, got, tc.want)
			}
		})
	}
}

// desiredFP is the fingerprint_sha256 of source's desired certdrift_certificate_info, "" if none.
func desiredFP(text, source string) string {
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "certdrift_certificate_info{") || !strings.Contains(l, `view="desired"`) ||
			!strings.Contains(l, `source="`+source+`"`) {
			continue
		}
		_, rest, _ := strings.Cut(l, `fingerprint_sha256="`)
		fp, _, _ := strings.Cut(rest, `"`)
		return fp
	}
	return ""
}
