// Command render draws certdrift's Grafana dashboards (dashboards/*.json) to PNG for review,
// from real data, without Grafana (which cannot be installed here). It starts the scenario of
// alerts/e2e_test.go — two real Envoys on one Secret volume, one reloading through SDS and one
// static, a rotation that leaves the static one stale, the real `certdrift serve`, and Debian's
// Prometheus scraping it every second — then, for each dashboard panel, substitutes the template
// variables, runs the panel's queries on Prometheus's HTTP API (instant for stat, table and
// bargauge; range for timeseries, heatmap and state-timeline), lays the results out on
// Grafana's 24-column grid as one HTML page with inline SVG, and has headless Chromium take a
// screenshot of it: docs/dashboards/<uid>.png.
//
// It is a review rendering: the queries, units, legends and layout are the dashboard's own, the
// drawing is deliberately simple and is not Grafana's.
//
//	go run ./dashboards/render [-out docs/dashboards] [-before 40s] [-after 80s]
//	go run ./dashboards/render -prometheus http://127.0.0.1:9090 -since 1h   # existing data
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/certdrift/certdrift/dashboards"
	"github.com/certdrift/certdrift/test/envoytest"
	"github.com/certdrift/certdrift/test/standalone"
)

// varFlags collects repeated -var name=value.
type varFlags map[string]string

func (v varFlags) String() string { return fmt.Sprint(map[string]string(v)) }

func (v varFlags) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want name=value, got %q", s)
	}
	v[name] = val
	return nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fl := flag.NewFlagSet("render", flag.ContinueOnError)
	out := fl.String("out", "", "directory for <uid>.png (default docs/dashboards in the repository)")
	htmlDir := fl.String("html", "", "also keep the HTML pages in this directory")
	certdrift := fl.String("certdrift", "", "certdrift binary (default: build ./cmd/certdrift)")
	before := fl.Duration("before", 40*time.Second, "samples before the rotation")
	after := fl.Duration("after", 80*time.Second, "samples after the rotation")
	promURL := fl.String("prometheus", "", "render from this Prometheus instead of starting the scenario")
	since := fl.Duration("since", time.Hour, "with -prometheus: the window to render")
	rate := fl.Duration("rate-interval", time.Minute, "value of $__rate_interval")
	vars := varFlags{}
	fl.Var(vars, "var", "template variable override name=value (repeatable)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	r := standalone.New("render")
	return r.Run(func() {
		if *out == "" {
			root, err := envoytest.RepoRoot()
			if err != nil {
				r.Fatalf("%v (or pass -out)", err)
			}
			*out = filepath.Join(root, "docs", "dashboards")
		}
		if *htmlDir == "" {
			*htmlDir = r.TempDir()
		}
		for _, d := range []string{*out, *htmlDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				r.Fatalf("%v", err)
			}
		}
		o := renderOptions{RateInterval: *rate, Vars: vars, OutDir: *out, HTMLDir: *htmlDir}
		var err error
		if o.Chromium, err = findChromium(); err != nil {
			r.Fatalf("%v", err)
		}
		var base string
		var begin time.Time
		if *promURL != "" {
			base, begin = strings.TrimRight(*promURL, "/"), time.Now().Add(-*since)
			o.Note = "Data: the Prometheus at " + base + "."
		} else {
			prom, err := findPrometheus()
			if err != nil {
				r.Fatalf("%v", err)
			}
			l := runScenario(ctx, r, scenarioConfig{Certdrift: *certdrift, Prometheus: prom, Before: *before, After: *after})
			base, begin = l.PromURL, l.Start
			o.Note = scenarioNote
		}
		o.Window = newWindow(begin, time.Now())
		res, err := renderDashboards(ctx, newPromAPI(base), dashboards.Files, o)
		if err != nil {
			r.Fatalf("%v", err)
		}
		for _, x := range res {
			fmt.Println("wrote", x.PNG)
		}
	}, 1)
}

// scenarioNote is printed on every page so nobody mistakes the data for a production fleet.
const scenarioNote = "Data: a real run of `go run ./dashboards/render` — Envoys edge-sds (SDS, reloads) and edge-static (static TLS, never reloads) " +
	"on one Secret volume rotated once, edge-gone configured but absent; real `certdrift serve`; Prometheus scraping every 1s."

// newWindow spans [start, end] with about 300 steps, at least one second each (the scrape interval).
func newWindow(start, end time.Time) window {
	step := (end.Sub(start) / 300).Round(time.Second)
	if step < time.Second {
		step = time.Second
	}
	return window{Start: start.Truncate(time.Second), End: end.Truncate(time.Second), Step: step}
}
