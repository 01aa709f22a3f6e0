package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/certdrift/certdrift/dashboards"
)

// TestScreenshotsFromRealData runs the whole chain the command runs, with a shorter scenario:
// real Envoys, `certdrift serve` and Prometheus, every dashboard queried and drawn, and headless
// Chromium's PNGs decoded. It checks that the data is the scenario's (the static Envoy stale,
// the absent one unreachable), that no panel query failed, and that each image is the page's
// size and not blank.
func TestScreenshotsFromRealData(t *testing.T) {
	chromium, err := findChromium()
	if err != nil {
		t.Fatal(err)
	}
	prom, err := findPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := runScenario(ctx, t, scenarioConfig{Prometheus: prom, Before: 8 * time.Second, After: 20 * time.Second})
	out := t.TempDir()
	res, err := renderDashboards(ctx, newPromAPI(l.PromURL), dashboards.Files, renderOptions{
		Window: newWindow(l.Start, time.Now()), RateInterval: 15 * time.Second,
		OutDir: out, HTMLDir: out, Chromium: chromium, Note: "test run",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("rendered %d dashboards, want the overview and the drill-down", len(res))
	}
	type want struct{ panel, label, value string }
	wants := map[string][]want{
		"certdrift-overview": {{"Active findings", "code", "STALE_LOADED"}, {"Active findings", "envoy", "edge-static"}, {"Findings by code", "code", "UNREACHABLE"}},
		"certdrift-workload": {{"Findings", "code", "STALE_SERVED"}, {"Envoy admin reachable", "envoy", "edge-gone"}, {"Loaded and served certificates", "envoy", "edge-sds"}},
	}
	for _, r := range res {
		t.Run(r.UID, func(t *testing.T) {
			for _, pr := range r.Results {
				for _, tr := range pr.Results {
					if tr.Err != nil {
						t.Errorf("query failed: %v", tr.Err)
					}
				}
			}
			for _, w := range wants[r.UID] {
				if !hasSeries(r.Results, w.panel, w.label, w.value) {
					t.Errorf("panel %q: no series with %s=%q", w.panel, w.label, w.value)
				}
			}
			st, err := checkPNG(r.PNG)
			if err != nil {
				t.Fatal(err)
			}
			if st.Width != pageWidth || st.Height != pageHeight(r.Results) {
				t.Errorf("%s is %dx%d, want %dx%d", r.PNG, st.Width, st.Height, pageWidth, pageHeight(r.Results))
			}
			// A blank or error page has a handful of colours; text, lines and panels have hundreds.
			if st.Colors < 200 {
				t.Errorf("%s has %d distinct colours: the page did not render", r.PNG, st.Colors)
			}
			if fi, err := os.Stat(r.PNG); err != nil {
				t.Error(err)
			} else if fi.Size() < 20_000 {
				t.Errorf("%s: %d bytes: too small for a dashboard", r.PNG, fi.Size())
			}
		})
	}
}

func hasSeries(rs []panelResult, title, label, value string) bool {
	for _, pr := range rs {
		if pr.Panel.Title != title {
			continue
		}
		for _, tr := range pr.Results {
			for _, s := range tr.Series {
				if s.Labels[label] == value {
					return true
				}
			}
		}
	}
	return false
}
