package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/proc"
)

// exporter is a running `certdrift serve`.
type exporter struct{ *cdbin.Serve }

// startServe runs the certdrift binary's serve command (cdbin.StartServe).
func startServe(t *testing.T, args ...string) *exporter {
	t.Helper()
	return &exporter{cdbin.StartServe(t, certdriftBin, args...)}
}

func (x *exporter) signal(t *testing.T, s os.Signal) {
	t.Helper()
	if err := x.Cmd.Process.Signal(s); err != nil {
		t.Fatalf("signal certdrift: %v", err)
	}
}

func (x *exporter) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + x.Addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape certdrift: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape certdrift: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// prometheus is a real Prometheus server scraping one target every second.
type prometheus struct {
	url  string
	logs *proc.SyncBuffer
}

func startPrometheus(t *testing.T, target string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		bin = "/usr/bin/prometheus"
		if _, serr := os.Stat(bin); serr != nil {
			t.Fatalf("the Prometheus server is needed (Debian's package): apt-get install prometheus (%v)", err)
		}
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	body := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: certdrift\n    static_configs:\n      - targets: ['%s']\n", target)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := proc.FreeAddr(t)
	logs := &proc.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	p := &prometheus{url: "http://" + addr, logs: logs}
	waitFor(t, "Prometheus to be ready", 30*time.Second, func() (bool, string) {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false, err.Error() + "\n" + logs.String()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string
	Value  float64
}

// query runs an instant query through Prometheus's HTTP API.
func (p *prometheus) query(t *testing.T, q string) []sample {
	t.Helper()
	resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&r); err != nil {
		t.Fatalf("query %s: decode: %v", q, err)
	}
	if r.Status != "success" {
		t.Fatalf("query %s: %s", q, r.Error)
	}
	out := make([]sample, 0, len(r.Data.Result))
	for _, s := range r.Data.Result {
		vs, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(vs, 64)
		if err != nil {
			t.Fatalf("query %s: value %v: %v", q, s.Value[1], err)
		}
		out = append(out, sample{Metric: s.Metric, Value: v})
	}
	return out
}

func waitFor(t *testing.T, what string, d time.Duration, f func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last string
	for {
		ok, s := f()
		if ok {
			return
		}
		last = s
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last:\n%s", what, d, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
