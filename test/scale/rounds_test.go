package scale

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/testbed"
)

// TestServeRounds measures what issue 20 asks of `certdrift serve` once it runs: the CPU of a
// round in which no Secret changed (the process's user+system time over a window of rounds with
// no scrape, from /proc/<pid>/stat, divided by the rounds it logged: so it includes the idle
// process between them but not the serving of scrapes), the resident set while serving, and
// scrape latency while rounds run (gzip scrapes every 100 ms across a second window, which rounds
// every --interval overlap; the process's CPU in that window is reported too). Small by
// default (CI: the same code paths at 300 Secrets, checking only that rounds complete and the
// exposition holds every Secret); CERTDRIFT_SCALE=full or 100k for the large data sets. It
// reports, it does not time-assert (docs/benchmarks.md holds the record).
//
//	CERTDRIFT_SCALE=full nice -n 10 go test ./test/scale/ -run TestServeRounds -v -timeout 30m
func TestServeRounds(t *testing.T) {
	mode := os.Getenv("CERTDRIFT_SCALE")
	spec, err := SpecFor(mode)
	if err != nil {
		t.Fatal(err)
	}
	window := 30 * time.Second
	if mode == ModeSmall {
		window = 6 * time.Second
	}
	tb := testbed.StartT(t, testbed.Options{Nodes: -1}) // fails with how to build the binaries when absent
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	if _, err := Populate(ctx, tb.Config, spec); err != nil {
		t.Fatalf("populate: %v", err)
	}
	// CERTDRIFT_SCALE_BINS=before=PATH,after=PATH compares builds on the same data, each run
	// once per CERTDRIFT_SCALE_RUNS (default 1), interleaved; default: this tree.
	bins := namedPaths(t, scaleBinsEnv)
	if len(bins) == 0 {
		bins = []namedPath{{"certdrift", buildCertdrift(t)}}
	}
	runs := 1
	if v, err := strconv.Atoi(os.Getenv("CERTDRIFT_SCALE_RUNS")); err == nil && v > 0 {
		runs = v
	}
	for r := range runs {
		for _, b := range bins {
			t.Logf("run %d, %s (%s):%s", r+1, b.name, b.path, serveRounds(ctx, t, b.path, tb.KubeconfigPath, mode, spec, window))
		}
	}
}

// serveRounds starts bin's `certdrift serve`, measures its rounds over window, stops it and
// returns the table.
func serveRounds(ctx context.Context, t *testing.T, bin, kubeconfig, mode string, spec Spec, window time.Duration) string {
	t.Helper()
	// Rounds are counted from serve's "round complete" lines, which are debug since serve logs
	// per-round lines only when asked.
	sp := startServe(ctx, t, bin, kubeconfig, mode, 5*time.Minute, "--interval", "2s", "--log.level", "debug")
	defer sp.stop()
	cmd, logs, base, ready := sp.cmd, sp.logs, sp.base, sp.ready
	client := &http.Client{Timeout: 30 * time.Second}

	scrape := func() ([]byte, time.Duration) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
		t0 := time.Now()
		resp, err := client.Do(req) // the transport asks for gzip and inflates
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
		}
		return b, time.Since(t0)
	}
	if b, _ := scrape(); countDesired(b) != spec.TLSSecrets {
		t.Fatalf("exposition has %d desired certificate_info series, want %d", countDesired(b), spec.TLSSecrets)
	}
	// The windows start after the first round and its follow-ups (the initial list's events).
	time.Sleep(3 * time.Second)
	countRounds := func() int { return strings.Count(logs.String(), `msg="round complete"`) }
	// Rounds alone: what a round costs, without the scrapes' share of the process.
	cpu0, rounds0 := procCPU(t, cmd.Process.Pid), countRounds()
	time.Sleep(window)
	quietCPU, quietRounds := procCPU(t, cmd.Process.Pid)-cpu0, countRounds()-rounds0
	if quietRounds < 2 {
		t.Fatalf("%d rounds in %v with --interval 2s", quietRounds, window)
	}
	cpu0, rounds0 = procCPU(t, cmd.Process.Pid), countRounds()
	var lat []time.Duration
	var last []byte
	for w0 := time.Now(); time.Since(w0) < window; time.Sleep(100 * time.Millisecond) {
		b, took := scrape()
		lat = append(lat, took)
		last = b
	}
	cpu, rounds := procCPU(t, cmd.Process.Pid)-cpu0, countRounds()-rounds0
	rss, hwm := procMemory(t, cmd.Process.Pid)
	if rounds < 2 {
		t.Fatalf("%d rounds in %v with --interval 2s", rounds, window)
	}
	if n := countDesired(last); n != spec.TLSSecrets {
		t.Fatalf("after %d rounds the exposition has %d desired certificate_info series, want %d", rounds, n, spec.TLSSecrets)
	}
	slices.Sort(lat)
	return fmt.Sprintf("\n%d TLS Secrets, %d namespaces, no Envoy pods, --interval 2s:\n"+
		"| ready after start | %.2f s |\n"+
		"| CPU per round, no Secret changed, no scrapes (idle time between rounds included) | %.0f ms (%.2f CPU-s over %d rounds in %v) |\n"+
		"| CPU per round while scraped every 100 ms | %.0f ms (%.2f CPU-s over %d rounds in %v) |\n"+
		"| RSS while serving | %.1f MB (peak %.1f MB) |\n"+
		"| scrape while rounds run (gzip, %d scrapes) | median %.1f ms, p99 %.1f ms, max %.1f ms |",
		spec.TLSSecrets, spec.Namespaces, ready.Seconds(), ms(quietCPU/time.Duration(quietRounds)), quietCPU.Seconds(), quietRounds, window,
		ms(cpu/time.Duration(rounds)), cpu.Seconds(), rounds, window,
		float64(rss)/1e6, float64(hwm)/1e6, len(lat), ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1]))
}

// procCPU is a running process's user plus system time, from /proc/<pid>/stat.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("read /proc/%d/stat: %v", pid, err)
	}
	// The command name may hold spaces: fields are counted after its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	// Linux reports clock ticks of USER_HZ, 100 on every architecture Go supports here.
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// syncBuffer is a bytes.Buffer the child's output goroutine writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
