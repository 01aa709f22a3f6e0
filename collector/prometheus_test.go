package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/test/proc"
)

// TestPrometheusScrapesBothFormats serves one store to two real Prometheus servers (Debian's
// package): one negotiating the text format (the default), one the protobuf format (what
// Prometheus asks for with native histograms on). Each must ingest every certdrift series of a
// Kubernetes-mode round — the certificate families' series carry different label names per view —
// with the same labels and values, and without a scrape error.
func TestPrometheusScrapesBothFormats(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		bin = "/usr/bin/prometheus"
		if _, serr := os.Stat(bin); serr != nil {
			t.Fatalf("the Prometheus server is needed (Debian's package): apt-get install prometheus (%v)", err)
		}
	}
	s := NewStore(Options{Now: clock(t0.Add(time.Hour)), Build: BuildInfo{Version: "test"}})
	r := fleet(200, 20)
	r.Inputs.Desired = append(r.Inputs.Desired, kubeRound(t0, true).Inputs.Desired...)
	s.Record(r)
	h := storeHandler(t, s)

	var mu sync.Mutex
	served := map[string]map[string]bool{} // Prometheus → Content-Types served to it
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		mu.Lock()
		defer mu.Unlock()
		who := r.URL.Query().Get("who")
		if served[who] == nil {
			served[who] = map[string]bool{}
		}
		ct, _, _ := strings.Cut(w.Header().Get("Content-Type"), ";")
		served[who][ct] = true
	}))
	defer srv.Close()
	target := strings.TrimPrefix(srv.URL, "http://")

	text := startPrometheusFor(t, bin, target, "text")
	pb := startPrometheusFor(t, bin, target, "protobuf", "--enable-feature=native-histograms")

	// Every family of the exposition, as the parser reads it: what both must hold.
	want := map[string]bool{}
	for _, mf := range gatherStore(t, s) {
		if strings.HasPrefix(mf.GetName(), "certdrift_") && mf.GetType().String() != "HISTOGRAM" {
			for _, m := range mf.GetMetric() {
				want[seriesKey(mf.GetName(), labelMap(m))] = true
			}
		}
	}
	// Histograms are stored by Prometheus as _bucket/_sum/_count (text) or, with native
	// histograms on, still as classic series for a classic histogram; compare the gauges and
	// counters, which are the views, findings and health.
	query := `{__name__=~"certdrift_.+",__name__!~".*_(bucket|sum|count)$",__name__!~"certdrift_(result_age_seconds|drift_age_seconds)"}`
	delete(want, "certdrift_result_age_seconds{}")
	for k := range want {
		if strings.HasPrefix(k, "certdrift_drift_age_seconds{") {
			delete(want, k)
		}
	}
	var gotText, gotPB map[string]float64
	deadline := time.Now().Add(60 * time.Second)
	for {
		gotText, gotPB = text.series(t, query), pb.series(t, query)
		if len(gotText) >= len(want) && len(gotPB) >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(gotText))); diff != "" {
		t.Errorf("series Prometheus ingested from the text format (-exposed +stored):\n%s\nPrometheus log:\n%s", diff, text.logs.String())
	}
	if diff := cmp.Diff(gotText, gotPB); diff != "" {
		t.Errorf("series ingested from text and from protobuf differ (-text +protobuf):\n%s\nPrometheus log:\n%s", diff, pb.logs.String())
	}
	for who, health := range map[string]*promServer{"text": text, "protobuf": pb} {
		if h := health.targetHealth(t); h != "up" {
			t.Errorf("the %s Prometheus reports the target %q", who, h)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !served["text"]["text/plain"] || len(served["text"]) != 1 {
		t.Errorf("formats served to the text Prometheus: %v", served["text"])
	}
	if !served["protobuf"]["application/vnd.google.protobuf"] || len(served["protobuf"]) != 1 {
		t.Errorf("formats served to the protobuf Prometheus: %v (the test proves nothing for protobuf)", served["protobuf"])
	}
	if len(want) < 100 {
		t.Errorf("only %d series compared: the fixture is too small to prove anything", len(want))
	}
}

func seriesKey(name string, labels map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if labels[k] != "" && k != "job" && k != "instance" && k != "__name__" {
			parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
		}
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

type promServer struct {
	url  string
	logs *proc.SyncBuffer
}

func startPrometheusFor(t *testing.T, bin, target, who string, flags ...string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	body := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: certdrift\n    params: {who: [%s]}\n    static_configs:\n      - targets: ['%s']\n", who, target)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := proc.FreeAddr(t)
	logs := &proc.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	args := append([]string{"--config.file=" + cfg, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr, "--log.level=warn"}, flags...)
	cmd := exec.CommandContext(ctx, "nice", append([]string{"-n", "10", bin}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	p := &promServer{url: "http://" + addr, logs: logs}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus (%s) not ready after 60s: %v\n%s", who, err, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// series runs an instant query and returns each series (without job and instance) and value.
func (p *promServer) series(t *testing.T, q string) map[string]float64 {
	t.Helper()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(q), &r)
	if r.Status != "success" {
		t.Fatalf("query %s: %s", q, r.Error)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		var v float64
		vs, _ := s.Value[1].(string)
		if _, err := fmt.Sscan(vs, &v); err != nil {
			t.Fatalf("query %s: value %v: %v", q, s.Value[1], err)
		}
		out[seriesKey(s.Metric["__name__"], s.Metric)] = v
	}
	return out
}

// targetHealth is the scrape target's health ("up", "down", "unknown") with its last error.
func (p *promServer) targetHealth(t *testing.T) string {
	t.Helper()
	var r struct {
		Data struct {
			ActiveTargets []struct {
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/targets", &r)
	if len(r.Data.ActiveTargets) != 1 {
		return fmt.Sprintf("%d targets", len(r.Data.ActiveTargets))
	}
	tg := r.Data.ActiveTargets[0]
	if tg.LastError != "" {
		return tg.Health + ": " + tg.LastError
	}
	return tg.Health
}

func (p *promServer) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(p.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v); err != nil {
		t.Fatalf("GET %s: decode: %v", path, err)
	}
}
