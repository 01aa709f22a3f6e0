package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The subset of Grafana's dashboard model that a review rendering needs. Unknown fields are
// ignored on purpose: the dashboards' own tests (package dashboards) check the full structure.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID              int              `json:"id"`
	Type            string           `json:"type"`
	Title           string           `json:"title"`
	GridPos         gridPos          `json:"gridPos"`
	Targets         []target         `json:"targets"`
	Panels          []panel          `json:"panels"` // a collapsed row's panels
	FieldConfig     fieldConfig      `json:"fieldConfig"`
	Transformations []transformation `json:"transformations"`
}

type gridPos struct {
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

type fieldConfig struct {
	Defaults struct {
		Unit string `json:"unit"`
	} `json:"defaults"`
}

type transformation struct {
	ID      string `json:"id"`
	Options struct {
		ExcludeByName map[string]bool `json:"excludeByName"`
	} `json:"options"`
}

type target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Format       string `json:"format"`
	Instant      bool   `json:"instant"`
	Hide         bool   `json:"hide"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	IncludeAll bool            `json:"includeAll"`
	Multi      bool            `json:"multi"`
}

// maxDashboardBytes bounds what parseDashboard accepts: the shipped dashboards are ~30 KiB.
const maxDashboardBytes = 4 << 20

func parseDashboard(name string, b []byte) (dashboard, error) {
	var d dashboard
	if len(b) > maxDashboardBytes {
		return d, fmt.Errorf("dashboard %s: %d bytes, more than the %d accepted", name, len(b), maxDashboardBytes)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("dashboard %s: %w", name, err)
	}
	if d.UID == "" {
		return d, fmt.Errorf("dashboard %s: no uid (the screenshot is named after it)", name)
	}
	if !regexp.MustCompile(`^[A-Za-z0-9._-]+$`).MatchString(d.UID) {
		return d, fmt.Errorf("dashboard %s: uid %q is not usable as a file name", name, d.UID)
	}
	return d, nil
}

// flatten lists the panels in drawing order, a collapsed row's panels after the row.
func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		inner := p.Panels
		p.Panels = nil
		out = append(out, p)
		out = append(out, flatten(inner)...)
	}
	return out
}

// instant reports whether a panel's targets are evaluated once (at the end of the window) rather
// than over the window, as Grafana does for these panel types.
func instant(p panel, t target) bool {
	switch p.Type {
	case "stat", "table", "bargauge", "gauge":
		return true
	case "timeseries", "heatmap", "state-timeline":
		return false
	}
	return t.Instant
}

// labelValuesQuery matches a query variable's label_values(selector, label).
var labelValuesQuery = regexp.MustCompile(`^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// variableQuery returns a query variable's query text; Grafana stores it either as a string or as
// an object with a query field.
func variableQuery(v variable) string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

// varRef matches $name, ${name}, ${name:format} and [[name]].
var varRef = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[A-Za-z]+)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\]`)

// substitute replaces template variables the way Grafana would for the chosen values. A
// variable missing from vars is an error naming it: a query sent with a literal "$x" would fail
// in Prometheus with a less helpful message.
func substitute(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(expr, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("undefined template variable(s) %s in %q", strings.Join(missing, ", "), expr)
	}
	return out, nil
}

// builtinVars are Grafana's global variables for a window: $__rate_interval is fixed (Grafana
// derives it from the scrape interval and the panel width), the others follow the window.
func builtinVars(win window, rateInterval time.Duration) map[string]string {
	r := win.End.Sub(win.Start)
	return map[string]string{
		"__rate_interval": promDuration(rateInterval),
		"__interval":      promDuration(win.Step),
		"__interval_ms":   fmt.Sprint(win.Step.Milliseconds()),
		"__range":         promDuration(r),
		"__range_s":       fmt.Sprint(int(r.Seconds())),
		"__range_ms":      fmt.Sprint(r.Milliseconds()),
	}
}

func promDuration(d time.Duration) string {
	if d%time.Minute == 0 && d >= time.Minute {
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}

// window is the time range a dashboard is rendered for.
type window struct {
	Start, End time.Time
	Step       time.Duration
}
