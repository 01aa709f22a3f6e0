package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// series is one result series: its labels and its samples (one for an instant query).
type series struct {
	Labels map[string]string
	Points []point
}

type point struct {
	T time.Time
	V float64
}

// querier is what the renderer needs from Prometheus's HTTP API.
type querier interface {
	Instant(ctx context.Context, expr string, at time.Time) ([]series, error)
	Range(ctx context.Context, expr string, w window) ([]series, error)
	LabelValues(ctx context.Context, label, match string, w window) ([]string, error)
}

// promAPI queries a Prometheus server over its HTTP API (/api/v1).
type promAPI struct {
	base   string // http://host:port
	client *http.Client
}

func newPromAPI(base string) *promAPI {
	return &promAPI{base: base, client: &http.Client{Timeout: 30 * time.Second}}
}

// maxResponseBytes bounds one API response: a dashboard panel's result is kilobytes.
const maxResponseBytes = 32 << 20

func (p *promAPI) get(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	u := p.base + path + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", path, err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: read response: %w", path, err)
	}
	if len(body) > maxResponseBytes {
		return nil, fmt.Errorf("prometheus %s: response larger than %d bytes", path, maxResponseBytes)
	}
	return decodeEnvelope(path, resp.StatusCode, body)
}

// decodeEnvelope unwraps the API's {status, data, errorType, error} envelope.
func decodeEnvelope(path string, code int, body []byte) (json.RawMessage, error) {
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("prometheus %s: HTTP %d, not an API response: %w", path, code, err)
	}
	if env.Status != "success" {
		return nil, fmt.Errorf("prometheus %s: %s: %s", path, env.ErrorType, env.Error)
	}
	return env.Data, nil
}

func (p *promAPI) Instant(ctx context.Context, expr string, at time.Time) ([]series, error) {
	data, err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {formatTime(at)}})
	if err != nil {
		return nil, err
	}
	return decodeResult(data)
}

func (p *promAPI) Range(ctx context.Context, expr string, w window) ([]series, error) {
	data, err := p.get(ctx, "/api/v1/query_range", url.Values{
		"query": {expr}, "start": {formatTime(w.Start)}, "end": {formatTime(w.End)},
		"step": {strconv.FormatFloat(w.Step.Seconds(), 'f', -1, 64)},
	})
	if err != nil {
		return nil, err
	}
	return decodeResult(data)
}

func (p *promAPI) LabelValues(ctx context.Context, label, match string, w window) ([]string, error) {
	data, err := p.get(ctx, "/api/v1/label/"+url.PathEscape(label)+"/values", url.Values{
		"match[]": {match}, "start": {formatTime(w.Start)}, "end": {formatTime(w.End)},
	})
	if err != nil {
		return nil, err
	}
	var vs []string
	if err := json.Unmarshal(data, &vs); err != nil {
		return nil, fmt.Errorf("prometheus label values of %s: %w", label, err)
	}
	sort.Strings(vs)
	return vs, nil
}

func formatTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// decodeResult turns a query's data (vector, matrix or scalar) into series.
func decodeResult(data json.RawMessage) ([]series, error) {
	var r struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode query result: %w", err)
	}
	switch r.ResultType {
	case "vector":
		var vs []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(r.Result, &vs); err != nil {
			return nil, fmt.Errorf("decode vector result: %w", err)
		}
		out := make([]series, 0, len(vs))
		for _, v := range vs {
			p, err := decodeSample(v.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, series{Labels: v.Metric, Points: []point{p}})
		}
		return out, nil
	case "matrix":
		var ms []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		}
		if err := json.Unmarshal(r.Result, &ms); err != nil {
			return nil, fmt.Errorf("decode matrix result: %w", err)
		}
		out := make([]series, 0, len(ms))
		for _, m := range ms {
			s := series{Labels: m.Metric}
			for _, v := range m.Values {
				p, err := decodeSample(v)
				if err != nil {
					return nil, err
				}
				s.Points = append(s.Points, p)
			}
			out = append(out, s)
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(r.Result, &v); err != nil {
			return nil, fmt.Errorf("decode scalar result: %w", err)
		}
		p, err := decodeSample(v)
		if err != nil {
			return nil, err
		}
		return []series{{Labels: map[string]string{}, Points: []point{p}}}, nil
	}
	return nil, fmt.Errorf("decode query result: result type %q not handled", r.ResultType)
}

// decodeSample reads [unix seconds, "value"].
func decodeSample(v [2]any) (point, error) {
	ts, ok := v[0].(float64)
	if !ok {
		return point{}, fmt.Errorf("decode sample: timestamp %v is not a number", v[0])
	}
	s, ok := v[1].(string)
	if !ok {
		return point{}, fmt.Errorf("decode sample: value %v is not a string", v[1])
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return point{}, fmt.Errorf("decode sample: value %q: %w", s, err)
	}
	return point{T: time.UnixMilli(int64(ts * 1000)), V: f}, nil
}
