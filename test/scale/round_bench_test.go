package scale

import (
	"context"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/test/testbed"
)

// populated starts a testbed holding the CERTDRIFT_SCALE data set (Small unless set).
func populated(b *testing.B) *testbed.Testbed {
	b.Helper()
	spec, err := SpecFor(os.Getenv("CERTDRIFT_SCALE"))
	if err != nil {
		b.Fatal(err)
	}
	tb := testbed.StartT(b, testbed.Options{Nodes: -1}) // fails with how to build the binaries when absent
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if _, err := Populate(ctx, tb.Config, spec); err != nil {
		b.Fatalf("populate: %v", err)
	}
	return tb
}

// BenchmarkServeRound is one `certdrift serve` round in-process with no Secret changed since the
// last: Gather on a started session, audit.Run, Store.Record, after one warm-up round. It reports
// the process's CPU per round (getrusage: GC and the informers' idle work included) and the
// heap left live after the rounds; with -cpuprofile it shows where a round goes.
//
//	CERTDRIFT_SCALE=full nice go test ./test/scale/ -run '^$' -bench ServeRound -benchtime 5x -benchmem
func BenchmarkServeRound(b *testing.B) {
	tb := populated(b)
	ctx := context.Background()
	s, err := gather.Start(ctx, tb.Config, config.DefaultPolicy, gather.KubeOptions{Options: gather.Options{Concurrency: 8}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	st := collector.NewStore(collector.Options{})
	round := func() audit.Report {
		t0 := time.Now()
		in := s.Gather(ctx, gather.Fleet)
		r := audit.Run(in, config.DefaultPolicy, time.Now())
		st.Record(collector.Round{Inputs: in, Report: r, Kubernetes: true, Started: t0, Finished: time.Now(),
			SourcesUp: map[string]bool{"kubernetes": true}})
		return r
	}
	first := round()
	cpu0 := processCPU(b)
	b.ResetTimer()
	var last audit.Report
	for b.Loop() {
		last = round()
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/1e6, "live-MB")
	writeHeapProfile(b)
	runtime.KeepAlive(st) // the store's objects and exposition are part of what serve holds
	if last.Summary.DesiredSources != first.Summary.DesiredSources || len(last.Findings) != len(first.Findings) {
		b.Fatalf("an unchanged round judged differently: %+v then %+v", first.Summary, last.Summary)
	}
}

// BenchmarkWholeAudit is `certdrift audit --kubeconfig … -o json` in-process: a session started,
// one round gathered, judged and rendered, the session closed.
//
//	CERTDRIFT_SCALE=full nice go test ./test/scale/ -run '^$' -bench WholeAudit -benchtime 3x -benchmem
func BenchmarkWholeAudit(b *testing.B) {
	tb := populated(b)
	cpu0 := processCPU(b)
	b.ResetTimer()
	for b.Loop() {
		in, err := gather.KubeOnce(context.Background(), tb.Config, config.DefaultPolicy, gather.KubeOptions{Options: gather.Options{Concurrency: 8}})
		if err != nil {
			b.Fatal(err)
		}
		if err := audit.RenderJSON(io.Discard, audit.Run(in, config.DefaultPolicy, time.Now())); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// writeHeapProfile writes the live heap, while the session still holds it, to the file
// CERTDRIFT_HEAP_PROFILE names (-test.memprofile is written after the session is closed).
func writeHeapProfile(b *testing.B) {
	path := os.Getenv("CERTDRIFT_HEAP_PROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// processCPU is this process's user plus system time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
