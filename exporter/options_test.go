package exporter

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/remediate"
)

// TestOptionsValidate: serve's defaults pass, and each value the round loop, the shards or the
// ports cannot work with is refused with an error naming its flag.
func TestOptionsValidate(t *testing.T) {
	valid := func() Options {
		return Options{Interval: 30 * time.Second, Jitter: 0.1, Debounce: 200 * time.Millisecond, Concurrency: 8,
			Shard: collector.Shard{Index: 0, Total: 1},
			Web: Web{ListenAddresses: []string{":9809"}, ScrapeTimeout: 10 * time.Second, MaxRequests: 10, MaxConns: 512,
				IdleTimeout: 15 * time.Second, HeaderTimeout: 5 * time.Second}}
	}
	cases := map[string]struct {
		reason string
		change func(*Options)
		want   string // in the error; "" for none
	}{
		"Defaults":           {reason: "serve's defaults", change: func(*Options) {}},
		"LastShard":          {reason: "the last of three shards", change: func(o *Options) { o.Shard = collector.Shard{Index: 2, Total: 3} }},
		"NoConcurrency":      {reason: "nothing would be read", change: func(o *Options) { o.Concurrency = 0 }, want: "--concurrency 0"},
		"TooMuchConcurrency": {reason: "bounded goroutines", change: func(o *Options) { o.Concurrency = 1025 }, want: "--concurrency 1025"},
		"FastInterval":       {reason: "rounds back to back", change: func(o *Options) { o.Interval = 10 * time.Millisecond }, want: "--interval"},
		"Jitter":             {reason: "more than half the interval", change: func(o *Options) { o.Jitter = 0.6 }, want: "--jitter 0.6"},
		"NegativeJitter":     {reason: "a negative fraction", change: func(o *Options) { o.Jitter = -0.1 }, want: "--jitter"},
		"NegativeGrace":      {reason: "durations are not negative", change: func(o *Options) { o.Grace = -time.Second }, want: "must not be negative"},
		"NegativeScrape":     {reason: "the scrape timeout too", change: func(o *Options) { o.Web.ScrapeTimeout = -time.Second }, want: "must not be negative"},
		"NoRequests":         {reason: "no scrape could be served", change: func(o *Options) { o.Web.MaxRequests = 0 }, want: "--web.max-requests 0"},
		"NoConnections":      {reason: "no connection could be held", change: func(o *Options) { o.Web.MaxConns = 0 }, want: "--web.max-connections 0"},
		"NoIdleTimeout":      {reason: "keep-alive without end", change: func(o *Options) { o.Web.IdleTimeout = 0 }, want: "--web.idle-timeout"},
		"NoShards":           {reason: "zero replicas", change: func(o *Options) { o.Shard.Total = 0 }, want: "--total-shards 0"},
		"ShardOutOfRange":    {reason: "a shard beyond the total", change: func(o *Options) { o.Shard = collector.Shard{Index: 3, Total: 3} }, want: "--shard 3: want 0..2"},
		"NoAddress":          {reason: "nowhere to serve", change: func(o *Options) { o.Web.ListenAddresses = nil }, want: "--web.listen-address"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := valid()
			tc.change(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s: %v", tc.reason, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%s: error %v, want one naming %q", tc.reason, err, tc.want)
			}
		})
	}
}

// TestStartRepairErrors: a cluster whose client cannot be built, and repair asked for before the
// Kubernetes session started, are errors naming --remediate, not a Remediator left half set up.
func TestStartRepairErrors(t *testing.T) {
	x, err := New(Options{Kubernetes: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r := RepairOptions{Policy: remediate.Policy{LeaseNamespace: "certdrift", Budget: 1, Timeout: time.Minute},
		LeaseName: "certdrift-remediate", Identity: "a", LeaseDuration: 15 * time.Second}
	for name, tc := range map[string]struct {
		rc   *rest.Config
		want string
	}{
		"BadClient": {&rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{CAFile: "/nonexistent/ca.crt"}}, "--remediate: kubernetes client"},
		"NoSession": {&rest.Config{Host: "https://127.0.0.1:1"}, "--remediate needs the Kubernetes session"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := x.StartRepair(tc.rc, r); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("StartRepair: %v, want an error saying %q", err, tc.want)
			}
			if x.repair != nil {
				t.Error("a Remediator was set up anyway")
			}
		})
	}
}
