package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"job": ".*", "namespace": "", "__rate_interval": "1m", "envoy": "edge-sds"}
	cases := map[string]struct {
		reason  string
		expr    string
		want    string
		wantErr string
	}{
		"RegexVariable": {reason: "multi-value variables become .*", expr: `x{job=~"$job"}`, want: `x{job=~".*"}`},
		"Braces":        {reason: "${name} and ${name:format}", expr: `rate(x{envoy="${envoy}", e2="${envoy:regex}"}[$__rate_interval])`, want: `rate(x{envoy="edge-sds", e2="edge-sds"}[1m])`},
		"OldSyntax":     {reason: "[[name]] still appears in old dashboards", expr: `x{e="[[envoy]]"}`, want: `x{e="edge-sds"}`},
		"Empty":         {reason: "an empty single value matches series without the label", expr: `x{namespace="$namespace"}`, want: `x{namespace=""}`},
		"Undefined":     {reason: "an unknown variable is named, not sent", expr: `x{pod="$pod"}`, wantErr: "undefined template variable(s) pod"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := substitute(tc.expr, vars)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s: error %v, want one containing %q", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestDecodeResult(t *testing.T) {
	t0 := time.UnixMilli(1700000000500)
	cases := map[string]struct {
		data    string
		want    []series
		wantErr string
	}{
		"Vector": {
			data: `{"resultType":"vector","result":[{"metric":{"code":"STALE_LOADED"},"value":[1700000000.5,"1"]}]}`,
			want: []series{{Labels: map[string]string{"code": "STALE_LOADED"}, Points: []point{{T: t0, V: 1}}}},
		},
		"Matrix": {
			data: `{"resultType":"matrix","result":[{"metric":{},"values":[[1700000000.5,"2"],[1700000001.5,"NaN"]]}]}`,
			want: []series{{Labels: map[string]string{}, Points: []point{{T: t0, V: 2}, {T: t0.Add(time.Second), V: nan}}}},
		},
		"Scalar":      {data: `{"resultType":"scalar","result":[1700000000.5,"0"]}`, want: []series{{Labels: map[string]string{}, Points: []point{{T: t0, V: 0}}}}},
		"BadValue":    {data: `{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}`, wantErr: `value "x"`},
		"BadTime":     {data: `{"resultType":"vector","result":[{"metric":{},"value":["1","1"]}]}`, wantErr: "timestamp"},
		"StringType":  {data: `{"resultType":"string","result":[1,"a"]}`, wantErr: `result type "string"`},
		"NotJSON":     {data: `<html>`, wantErr: "decode query result"},
		"WrongShape":  {data: `{"resultType":"matrix","result":{"a":1}}`, wantErr: "decode matrix result"},
		"EmptyVector": {data: `{"resultType":"vector","result":[]}`, want: []series{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := decodeResult(json.RawMessage(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b float64) bool { return a == b || (a != a && b != b) })); diff != "" {
				t.Errorf("-want +got:\n%s", diff)
			}
		})
	}
}

var nan = func() float64 { z := 0.0; return z / z }()

func TestDecodeEnvelope(t *testing.T) {
	_, err := decodeEnvelope("/api/v1/query", 400, []byte(`{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`))
	if err == nil || !strings.Contains(err.Error(), "bad_data: parse error at char 3") || !strings.Contains(err.Error(), "/api/v1/query") {
		t.Errorf("error %v: want the endpoint and Prometheus's message", err)
	}
	if _, err := decodeEnvelope("/api/v1/query", 502, []byte("Bad Gateway")); err == nil || !strings.Contains(err.Error(), "HTTP 502") {
		t.Errorf("error %v: want the HTTP status of a non-API response", err)
	}
}

func TestFormatValue(t *testing.T) {
	cases := map[string]struct {
		v    float64
		unit string
		want string
	}{
		"Count":          {v: 4, unit: "short", want: "4"},
		"Fraction":       {v: 0.648, unit: "", want: "0.648"},
		"Millis":         {v: 0.0351, unit: "s", want: "35.10 ms"},
		"Seconds":        {v: 29.08, unit: "s", want: "29.08 s"},
		"LongDuration":   {v: 364*86400 + 23*3600 + 59*60, unit: "dtdurations", want: "364 days, 23 hours"},
		"OneDayExact":    {v: 86400, unit: "dtdurations", want: "1 day"},
		"Expired":        {v: -2 * 3600, unit: "dtdurations", want: "-2 hours"},
		"Rate":           {v: 0, unit: "ops", want: "0 ops/s"},
		"BoolNo":         {v: 0, unit: "bool_yes_no", want: "No"},
		"BoolYes":        {v: 1, unit: "bool_yes_no", want: "Yes"},
		"NaNInAnyUnit":   {v: nan, unit: "s", want: "NaN"},
		"SubSecondShort": {v: 0.5, unit: "dtdurations", want: "500 ms"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := formatValue(tc.v, tc.unit); got != tc.want {
				t.Errorf("formatValue(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
			}
		})
	}
}

// recordingQuerier answers from fixed data and records what was asked, so evaluate and
// resolveVars can be checked without a Prometheus.
type recordingQuerier struct {
	asked  []string
	values []string
	series []series
	fail   string // an expression that returns an error
}

func (q *recordingQuerier) Instant(_ context.Context, expr string, _ time.Time) ([]series, error) {
	q.asked = append(q.asked, "instant "+expr)
	if expr == q.fail {
		return nil, errors.New("bad_data: boom")
	}
	return q.series, nil
}

func (q *recordingQuerier) Range(_ context.Context, expr string, _ window) ([]series, error) {
	q.asked = append(q.asked, "range "+expr)
	return q.series, nil
}

func (q *recordingQuerier) LabelValues(_ context.Context, label, match string, _ window) ([]string, error) {
	q.asked = append(q.asked, "labels "+label+" "+match)
	return q.values, nil
}

const testDashboard = `{
  "uid": "t", "title": "Test board",
  "templating": {"list": [
    {"name": "datasource", "type": "datasource", "query": "prometheus"},
    {"name": "job", "type": "query", "query": {"query": "label_values(certdrift_build_info, job)"}, "includeAll": true, "multi": true},
    {"name": "namespace", "type": "query", "query": "label_values(certdrift_certificate_info{job=~\"$job\"}, namespace)"}
  ]},
  "panels": [
    {"id": 1, "type": "row", "title": "Findings", "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}},
    {"id": 2, "type": "stat", "title": "Warnings", "gridPos": {"x": 0, "y": 1, "w": 6, "h": 4},
     "targets": [{"refId": "A", "expr": "count(certdrift_finding{job=~\"$job\"})", "legendFormat": "warning"}]},
    {"id": 3, "type": "table", "title": "Active findings", "gridPos": {"x": 6, "y": 1, "w": 18, "h": 8},
     "transformations": [{"id": "organize", "options": {"excludeByName": {"Time": true, "Value": true}}}],
     "targets": [{"refId": "A", "expr": "max by (code, envoy) (certdrift_finding{namespace=\"$namespace\"})", "format": "table", "instant": true}]},
    {"id": 4, "type": "timeseries", "title": "Drift <age>", "gridPos": {"x": 0, "y": 9, "w": 12, "h": 8},
     "fieldConfig": {"defaults": {"unit": "s"}},
     "targets": [{"refId": "A", "expr": "rate(x[$__rate_interval])", "legendFormat": "{{envoy}} ← {{ source }}"},
                 {"refId": "B", "expr": "hidden", "hide": true}]}
  ]
}`

func TestEvaluateAndRender(t *testing.T) {
	d, err := parseDashboard("test.json", []byte(testDashboard))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	win := window{Start: t0, End: t0.Add(2 * time.Minute), Step: time.Second}
	labels := map[string]string{"code": "STALE_LOADED", "envoy": "edge-static", "source": "web"}
	q := &recordingQuerier{
		values: []string{"prod", "staging"},
		series: []series{{Labels: labels, Points: []point{{T: t0, V: 3}, {T: t0.Add(time.Second), V: 4}, {T: t0.Add(time.Minute), V: 5}}}},
		fail:   `count(certdrift_finding{job=~".*"})`,
	}
	vars, err := resolveVars(context.Background(), q, d, win, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if vars["job"] != ".*" || vars["namespace"] != "prod" {
		t.Errorf("job=%q namespace=%q: want All (.*) and the first label value", vars["job"], vars["namespace"])
	}
	res := evaluate(context.Background(), q, d, vars, win)
	wantAsked := []string{
		`labels namespace certdrift_certificate_info{job=~".*"}`,
		`instant count(certdrift_finding{job=~".*"})`,
		`instant max by (code, envoy) (certdrift_finding{namespace="prod"})`,
		`range rate(x[1m])`,
	}
	if diff := cmp.Diff(wantAsked, q.asked); diff != "" {
		t.Errorf("queries sent (-want +got):\n%s", diff)
	}
	page := renderPage(pageInfo{Dashboard: d, Vars: vars, Window: win, Note: "unit test"}, res)
	for _, want := range []string{
		`<title>Test board</title>`,
		// The row spans the grid at the top; the table starts at column 6 of 24.
		`class="row" style="left:16px;top:72px;width:1560px`,
		`data-id="3" data-type="table" style="left:408px;top:110px;width:1168px;height:296px"`,
		// A failed query is shown in its panel, with Prometheus's message.
		`panel &#34;Warnings&#34; target A: bad_data: boom`,
		// The table has the labels and honours organize's excluded Value.
		`<th>code</th><th>envoy</th><th>source</th></tr>`, `<td title="STALE_LOADED">STALE_LOADED</td>`,
		// The time series is a line with a gap (the minute without samples) and its legend.
		`<path d="M`, `edge-static ← web <b>5 s</b>`,
		`Drift &lt;age&gt;`, `job=All  namespace=prod`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<th>Value</th>") {
		t.Errorf("page shows the Value column the organize transformation excludes")
	}
	if n := strings.Count(page, " M"); n != 1 {
		t.Errorf("the series has a one-minute gap: want two path segments (one extra M), got %d", n)
	}
}

func TestParseDashboardRejects(t *testing.T) {
	cases := map[string]struct{ body, wantErr string }{
		"NotJSON":  {body: `{`, wantErr: "dashboard bad.json"},
		"NoUID":    {body: `{"title":"x"}`, wantErr: "no uid"},
		"PathUID":  {body: `{"uid":"../x"}`, wantErr: "not usable as a file name"},
		"TooLarge": {body: `{"uid":"x","title":"` + strings.Repeat("a", maxDashboardBytes) + `"}`, wantErr: "more than"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := parseDashboard("bad.json", []byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestAxisStep(t *testing.T) {
	cases := map[string]struct {
		span float64
		unit string
		want float64
	}{
		"CountsRound":    {span: 2, unit: "short", want: 0.5},
		"SecondsPlain":   {span: 80, unit: "s", want: 20},
		"MinutesRound":   {span: 20 * 60, unit: "s", want: 5 * 60},
		"ExpiryInDays":   {span: 400 * 86400, unit: "dtdurations", want: 100 * 86400},
		"HoursNotSecond": {span: 10 * 3600, unit: "s", want: 2.5 * 3600},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := axisStep(tc.span, tc.unit); got != tc.want {
				t.Errorf("axisStep(%v, %q) = %v, want %v", tc.span, tc.unit, got, tc.want)
			}
		})
	}
}
