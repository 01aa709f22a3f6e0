package collector

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

// TestHandlerFormats: every way of asking for /metrics — text or protobuf, plain or gzip, before
// the first round and after rounds — gets the same series from the same rows; a gzipped text
// scrape (the cached member and a fresh one) is byte for byte the plain one; what the extra
// gatherers hold is appended, and one that fails is counted and does not fail the scrape.
// promtool checks the text.
func TestHandlerFormats(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found on PATH: install it with `apt-get install prometheus`")
	}
	s := NewStore(Options{Now: clock(t0.Add(time.Minute)), Build: BuildInfo{Version: "v1"}})
	extra := prometheus.NewRegistry()
	extra.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "extra_value", Help: "An extra family."}, func() float64 { return 7 }))
	h, err := s.Handler(HandlerOpts{Extra: []prometheus.Gatherer{extra}, Registry: extra})
	if err != nil {
		t.Fatal(err)
	}
	for i, record := range []func(){
		func() {},
		func() { s.Record(kubeRound(t0, true)) },
		func() { s.Record(kubeRound(t0.Add(time.Second), false)); rotation(s) },
	} {
		record()
		resp, plain := scrape(t, h, acceptText, "identity")
		if ct := resp.Header.Get("Content-Type"); ct != string(expfmt.NewFormat(expfmt.TypeTextPlain)) {
			t.Errorf("step %d: text Content-Type %q", i, ct)
		}
		resp, gz := scrape(t, h, acceptText, "gzip")
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("step %d: gzip not used when accepted", i)
		}
		if !bytes.Equal(plain, gz) {
			t.Errorf("step %d: the gzipped text differs from the plain text", i)
		}
		_, pb := scrape(t, h, acceptProto, "identity")
		_, pbgz := scrape(t, h, acceptProto, "gzip")
		if !bytes.Equal(pb, pbgz) {
			t.Errorf("step %d: the gzipped protobuf differs from the plain protobuf", i)
		}
		fromText, fromProto := parseText(t, plain), parseProto(t, pb)
		if diff := cmp.Diff(normalized(t, fromText), normalized(t, fromProto)); diff != "" {
			t.Errorf("step %d: text and protobuf differ (-text +protobuf):\n%s", i, diff)
		}
		if g := family(fromText, "extra_value"); len(g) != 1 || g[0].GetGauge().GetValue() != 7 {
			t.Errorf("step %d: the extra gatherer's family is missing: %v", i, g)
		}
		if n := len(family(fromText, "promhttp_metric_handler_errors_total")); n != 2 {
			t.Errorf("step %d: %d promhttp_metric_handler_errors_total series, want gathering and encoding", i, n)
		}
		if (i > 0) != (len(family(fromText, "certdrift_certificate_info")) > 0) {
			t.Errorf("step %d: certificate series %v", i, family(fromText, "certdrift_certificate_info"))
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(plain)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("step %d: promtool check metrics: %v\n%s", i, err, out)
		}
	}
	// A failing gatherer is counted and logged; the scrape still serves the rest.
	errReg := prometheus.NewRegistry()
	failing := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return nil, errors.New("broken gatherer") })
	h, err = s.Handler(HandlerOpts{Extra: []prometheus.Gatherer{errReg, failing}, Registry: errReg})
	if err != nil {
		t.Fatal(err)
	}
	scrape(t, h, acceptText, "gzip")
	_, plain := scrape(t, h, acceptProto, "")
	mfs := parseProto(t, plain)
	var errs float64
	for _, m := range family(mfs, "promhttp_metric_handler_errors_total") {
		if labelMap(m)["cause"] == "gathering" {
			errs = m.GetCounter().GetValue()
		}
	}
	if errs != 1 || len(family(mfs, "certdrift_certificate_info")) == 0 {
		t.Errorf("with a failing gatherer: gathering errors %g before this scrape (want 1), %d certificate series", errs, len(family(mfs, "certdrift_certificate_info")))
	}
	// Control: promtool does reject a broken exposition, so its silence above means something.
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader("# TYPE x gauge\nx{a=\"1\"} 1\n# TYPE x gauge\nx{a=\"2\"} 2\n")
	if err := cmd.Run(); err == nil {
		t.Error("promtool check metrics accepted a family declared twice: the check above proves nothing")
	}
}

// TestRenderMatchesExpfmt: the one render path writes what client_golang and expfmt would for the
// same series — text lines byte for byte, protobuf Metrics equal — except that empty label
// values are left out, which Prometheus does not tell from absent labels.
func TestRenderMatchesExpfmt(t *testing.T) {
	f := newTestFamily("test_gauge", "A help with a \\ backslash\nand a newline.", dto.MetricType_GAUGE)
	c := newTestFamily("test_total", "A counter.", dto.MetricType_COUNTER)
	names := labelSet("a", "b", "c")
	cases := map[string]struct {
		f      *metricFamily
		values []string
		v      float64
	}{
		"Plain":         {f: f, values: []string{"x", "y", "z"}, v: 1.5},
		"Escapes":       {f: f, values: []string{`back\slash`, "new\nline", `"quoted"`}, v: 0},
		"EmptyValues":   {f: f, values: []string{"", "y", ""}, v: -1},
		"AllEmpty":      {f: f, values: []string{"", "", ""}, v: 1},
		"Large":         {f: f, values: []string{"x", "y", "z"}, v: 1.7970768e+09},
		"Tiny":          {f: f, values: []string{"x", "y", "z"}, v: 5e-324},
		"NaN":           {f: f, values: []string{"x", "y", "z"}, v: math.NaN()},
		"Inf":           {f: f, values: []string{"x", "y", "z"}, v: math.Inf(+1)},
		"MinusInf":      {f: f, values: []string{"x", "y", "z"}, v: math.Inf(-1)},
		"Counter":       {f: c, values: []string{"x", "", "z"}, v: 42},
		"UnicodeValues": {f: f, values: []string{"CN=Zürich,O=Ünïcödé", "日本", "z"}, v: 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var rs rowSet
			rs.sample(tc.f, names, tc.values, tc.v)
			want := expfmtFamily(t, tc.f, names, tc.values, tc.v)
			var text bytes.Buffer
			if _, err := expfmt.MetricFamilyToText(&text, want); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := rs.writeText(&got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(text.String(), got.String()); diff != "" {
				t.Errorf("text (-expfmt +ours):\n%s", diff)
			}
			var pb bytes.Buffer
			if err := rs.writeProto(&pb, failOnBadRow(t)); err != nil {
				t.Fatal(err)
			}
			gotPB := &dto.MetricFamily{}
			if err := protodelim.UnmarshalFrom(bytes.NewReader(pb.Bytes()), gotPB); err != nil {
				t.Fatalf("our protobuf does not parse: %v", err)
			}
			if !proto.Equal(want, gotPB) {
				t.Errorf("protobuf differs:\nexpfmt %v\nours   %v", want, gotPB)
			}
		})
	}
	// Invalid UTF-8 is replaced, so the protobuf (whose strings must be UTF-8) still parses.
	var rs rowSet
	rs.sample(f, names, []string{"bad\xffbyte", "y", "z"}, 1)
	var pb bytes.Buffer
	if err := rs.writeProto(&pb, failOnBadRow(t)); err != nil {
		t.Fatal(err)
	}
	if err := protodelim.UnmarshalFrom(bytes.NewReader(pb.Bytes()), &dto.MetricFamily{}); err != nil {
		t.Errorf("a label value with invalid UTF-8 broke the protobuf: %v", err)
	}
}

// failOnBadRow fails the test when a row's protobuf form cannot be derived.
func failOnBadRow(t *testing.T) func(error) {
	return func(err error) { t.Errorf("a row did not convert to protobuf: %v", err) }
}

// TestProtoRowsFromText: the protobuf Metrics derived from a family's text rows are byte for
// byte those appendProtoSample renders from the series themselves, for several series per row
// set and label values made of every character the escaping touches; a row this package did
// not write is reported, and the rows before it are kept.
func TestProtoRowsFromText(t *testing.T) {
	f := newTestFamily("test_rows", "Rows.", dto.MetricType_GAUGE)
	c := newTestFamily("test_rows_total", "Rows.", dto.MetricType_COUNTER)
	names := labelSet("a", "b", "le_not", "z")
	alphabet := []string{"", "x", `\`, `"`, "\n", "\\\"", "\n\\", "=", ",", "}", "{", " ", "ü", "\xff", "a=\"b\",c"}
	values := []float64{0, 1, -1, 1.5, 5e-324, 1.7976931348623157e308, -2.5e-10, 1e21, 123456789012, math.Inf(1), math.Inf(-1)}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, fam := range []*metricFamily{f, c} {
		var rs rowSet
		var want []byte
		for i := range 500 {
			vals := make([]string, len(names))
			for j := range vals {
				var b strings.Builder
				for range rng.IntN(4) {
					b.WriteString(alphabet[rng.IntN(len(alphabet))])
				}
				vals[j] = b.String()
			}
			v := values[i%len(values)]
			rs.sample(fam, names, vals, v)
			want = appendProtoSample(want, fam.typ, names, vals, v)
		}
		got, err := rs.rows[0].protoRows(nil)
		if err != nil {
			t.Fatalf("%s: %v", fam.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the protobuf derived from the text differs from the one rendered from the series", fam.name)
		}
	}
	// The control: a row that is not this family's, after a good one.
	var rs rowSet
	rs.sample(f, names, []string{"x", "", "", ""}, 2)
	rs.rows[0].text = append(rs.rows[0].text, "other_family{a=\"x\"} 1\n"...)
	got, err := rs.rows[0].protoRows(nil)
	if err == nil {
		t.Fatal("a row of another family converted without an error")
	}
	if want := appendProtoSample(nil, f.typ, names, []string{"x", "", "", ""}, 2); !bytes.Equal(got, want) {
		t.Error("the good row before the bad one was not kept")
	}
	for _, bad := range []string{"test_rows{a=\"x} 1\n", "test_rows{a=x} 1\n", "test_rows{a=\"x\" 1\n", "test_rows 1", "test_rows{a=\"x\"}\n", "test_rows{a=\"x\"} one\n"} {
		r := rows{f: f, text: []byte(bad)}
		if _, err := r.protoRows(nil); err == nil {
			t.Errorf("row %q converted without an error", bad)
		}
	}
}

// newTestFamily is a family outside allFamilies, so the docs test does not expect it.
func newTestFamily(name, help string, typ dto.MetricType) *metricFamily {
	f := newFamily(name, help, typ)
	allFamilies = allFamilies[:len(allFamilies)-1]
	f.id = -1
	return f
}

// expfmtFamily is the series as client_golang builds it (a const metric, its empty labels left
// out as ours are), gathered into a family.
func expfmtFamily(t *testing.T, f *metricFamily, names labels, values []string, v float64) *dto.MetricFamily {
	t.Helper()
	var ln, lv []string
	for i, n := range names {
		if values[i] != "" {
			ln, lv = append(ln, n), append(lv, values[i])
		}
	}
	vt := prometheus.GaugeValue
	if f.typ == dto.MetricType_COUNTER {
		vt = prometheus.CounterValue
	}
	m := prometheus.MustNewConstMetric(prometheus.NewDesc(f.name, f.help, ln, nil), vt, v, lv...)
	out := &dto.Metric{}
	if err := m.Write(out); err != nil {
		t.Fatal(err)
	}
	return &dto.MetricFamily{Name: proto.String(f.name), Help: proto.String(f.help), Type: f.typ.Enum(), Metric: []*dto.Metric{out}}
}

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"": false, "gzip": true, "identity": false, "deflate, gzip;q=1.0, *;q=0.5": true, "gzip;q=0": false, "br": false,
	} {
		r := httptestRequest(header)
		if got := acceptsGzip(r); got != want {
			t.Errorf("Accept-Encoding %q: %v, want %v", header, got, want)
		}
	}
}

func httptestRequest(acceptEncoding string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Accept-Encoding", acceptEncoding)
	return r
}
