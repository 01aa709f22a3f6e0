package collector

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/encoding/protodelim"
)

const (
	acceptText  = "text/plain;version=0.0.4"
	acceptProto = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
)

// scrape GETs /metrics from h as a client with accept and encoding would, and returns the
// response with its body decompressed.
func scrape(t testing.TB, h http.Handler, accept, encoding string) (*http.Response, []byte) {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
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
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: HTTP %d: %s", resp.StatusCode, b)
	}
	return resp, b
}

// parseText parses a text exposition with the Prometheus parser; a family seen twice, or a
// malformed line, fails.
func parseText(t testing.TB, b []byte) []*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the text exposition does not parse: %v", err)
	}
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

// parseProto reads a delimited protobuf exposition; a family seen twice fails.
func parseProto(t testing.TB, b []byte) []*dto.MetricFamily {
	t.Helper()
	r := bytes.NewReader(b)
	var out []*dto.MetricFamily
	seen := map[string]bool{}
	for {
		mf := &dto.MetricFamily{}
		if err := protodelim.UnmarshalFrom(r, mf); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("the protobuf exposition does not parse: %v", err)
		}
		if seen[mf.GetName()] {
			t.Fatalf("the protobuf exposition has family %s twice", mf.GetName())
		}
		seen[mf.GetName()] = true
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

// normalized renders families as Prometheus stores them: one line per sample, labels sorted,
// empty label values dropped (Prometheus does not tell them from absent labels), lines sorted.
func normalized(t testing.TB, mfs []*dto.MetricFamily) []string {
	t.Helper()
	var lines []string
	for _, mf := range mfs {
		mf = cloneFamily(mf)
		for _, m := range mf.Metric {
			m.Label = slices.DeleteFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetValue() == "" })
			slices.SortFunc(m.Label, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
		}
		var b bytes.Buffer
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatalf("render %s: %v", mf.GetName(), err)
		}
		for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			if !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
	}
	slices.Sort(lines)
	return lines
}

func cloneFamily(mf *dto.MetricFamily) *dto.MetricFamily {
	out := &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type}
	for _, m := range mf.Metric {
		c := &dto.Metric{Gauge: m.Gauge, Counter: m.Counter, Histogram: m.Histogram, Untyped: m.Untyped, Summary: m.Summary}
		for _, l := range m.Label {
			c.Label = append(c.Label, &dto.LabelPair{Name: l.Name, Value: l.Value})
		}
		out.Metric = append(out.Metric, c)
	}
	return out
}

func storeHandler(t testing.TB, s *Store) http.Handler {
	t.Helper()
	h, err := s.Handler(HandlerOpts{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// gatherStore scrapes the store in both formats, checks that they hold the same samples and
// the same HELP and TYPE, and returns the text scrape's families.
func gatherStore(t testing.TB, s *Store) []*dto.MetricFamily {
	t.Helper()
	h := storeHandler(t, s)
	_, text := scrape(t, h, acceptText, "")
	resp, pb := scrape(t, h, acceptProto, "")
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/vnd.google.protobuf") {
		t.Fatalf("a protobuf scrape got Content-Type %q", ct)
	}
	fromText, fromProto := parseText(t, text), parseProto(t, pb)
	if diff := cmp.Diff(normalized(t, fromText), normalized(t, fromProto)); diff != "" {
		t.Fatalf("text and protobuf scrapes differ (-text +protobuf):\n%s", diff)
	}
	if diff := cmp.Diff(headers(fromText), headers(fromProto)); diff != "" {
		t.Fatalf("text and protobuf families differ (-text +protobuf):\n%s", diff)
	}
	return fromText
}

func headers(mfs []*dto.MetricFamily) []string {
	var out []string
	for _, mf := range mfs {
		out = append(out, mf.GetName()+" "+mf.GetType().String()+" "+mf.GetHelp())
	}
	return out
}

// compareGolden checks the store's families named in names against a golden text exposition
// (all families when names is empty), as Prometheus would store both; and lints them.
func compareGolden(t testing.TB, s *Store, golden string, names ...string) {
	t.Helper()
	got := gatherStore(t, s)
	want := parseText(t, []byte(strings.TrimLeft(golden, "\n")))
	if len(names) > 0 {
		got = slices.DeleteFunc(got, func(mf *dto.MetricFamily) bool { return !slices.Contains(names, mf.GetName()) })
		want = slices.DeleteFunc(want, func(mf *dto.MetricFamily) bool { return !slices.Contains(names, mf.GetName()) })
	}
	if diff := cmp.Diff(normalized(t, want), normalized(t, got)); diff != "" {
		t.Errorf("exposition differs from the golden (-golden +exposed):\n%s", diff)
	}
	if diff := cmp.Diff(headers(want), headers(got)); diff != "" {
		t.Errorf("HELP or TYPE differ from the golden (-golden +exposed):\n%s", diff)
	}
	problems, err := promlint.NewWithMetricFamilies(got).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}
