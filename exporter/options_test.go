package exporter

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/gather"
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

// TestRepairOptionsValidate: serve --remediate's own rules (a cluster, the whole fleet, a Lease
// that can be renewed) before the shared policy's, whose lease namespace it fills in.
func TestRepairOptionsValidate(t *testing.T) {
	valid := func() RepairOptions {
		return RepairOptions{LeaseName: "certdrift-remediate", LeaseDuration: 15 * time.Second,
			Policy: remediate.Policy{Budget: 1, Cooldown: time.Minute, Timeout: time.Minute}}
	}
	cases := map[string]struct {
		reason string
		change func(*RepairOptions)
		kube   bool
		shards int
		want   string // in the error; "" for none
	}{
		"Valid":      {reason: "a cluster, one shard, the defaults", change: func(*RepairOptions) {}, kube: true, shards: 1},
		"LocalMode":  {reason: "repair in the exporter is Kubernetes only", change: func(*RepairOptions) {}, shards: 1, want: "needs Kubernetes mode"},
		"Sharded":    {reason: "a shard sees part of the fleet", change: func(*RepairOptions) {}, kube: true, shards: 2, want: "--total-shards > 1"},
		"NoLease":    {reason: "the election needs a Lease", change: func(r *RepairOptions) { r.LeaseName = "" }, kube: true, shards: 1, want: "--remediate-lease-name"},
		"ShortLease": {reason: "a Lease under 2s cannot be renewed reliably", change: func(r *RepairOptions) { r.LeaseDuration = time.Second }, kube: true, shards: 1, want: "--remediate-lease-duration 1s"},
		"Policy":     {reason: "the shared policy is checked for serve", change: func(r *RepairOptions) { r.Policy.Strategy = string(remediate.Exec) }, kube: true, shards: 1, want: "only audit --reload"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", "from-pod")
			r := valid()
			tc.change(&r)
			err := r.Validate(tc.kube, tc.shards)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("%s: %v", tc.reason, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%s: error %v, want one naming %q", tc.reason, err, tc.want)
			case tc.want == "" && r.Policy.LeaseNamespace != "from-pod":
				t.Errorf("%s: lease namespace %q, want POD_NAMESPACE's", tc.reason, r.Policy.LeaseNamespace)
			}
		})
	}
}

// TestStartOrder: Kubernetes mode builds the cluster's options from the exporter's policy and
// concurrency, then its REST config; an error at one step stops the next.
func TestStartOrder(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	x, err := New(Options{Kubernetes: true, Concurrency: 5, Timeout: 4 * time.Second, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		optErr, restErr error
		wantCalls       string
	}{
		"OptionsRefused": {optErr: errors.New("bad options"), wantCalls: "options"},
		"NoCluster":      {restErr: errors.New("no cluster"), wantCalls: "options rest"},
	} {
		t.Run(name, func(t *testing.T) {
			var calls []string
			var got gather.Options
			k := Kube{
				Options: func(g gather.Options) (gather.KubeOptions, error) {
					calls, got = append(calls, "options"), g
					return gather.KubeOptions{Options: g}, tc.optErr
				},
				REST: func() (*rest.Config, error) { calls = append(calls, "rest"); return nil, tc.restErr },
			}
			err := x.Start(context.Background(), k, nil)
			want := tc.optErr
			if want == nil {
				want = tc.restErr
			}
			if !errors.Is(err, want) {
				t.Errorf("Start: %v, want %v", err, want)
			}
			if c := strings.Join(calls, " "); c != tc.wantCalls {
				t.Errorf("called %q, want %q", c, tc.wantCalls)
			}
			if got.Timeout != 4*time.Second || got.Concurrency != 5 || got.Log != log {
				t.Errorf("the cluster's options were built from %+v, want the --timeout, concurrency and log", got)
			}
			if x.kube != nil {
				t.Error("a session was started")
			}
		})
	}
}
