package main

import (
	"context"
	"fmt"
	"time"
)

// targetResult is what one panel target returned, or why it did not.
type targetResult struct {
	Target target
	Expr   string // after substitution: what was sent to Prometheus
	Series []series
	Err    error
}

// panelResult pairs a panel with its targets' results.
type panelResult struct {
	Panel   panel
	Results []targetResult
}

// resolveVars chooses a value for each template variable as a person opening the dashboard
// would see it: "All" (the regex .*) for multi-value variables; for a single-value query
// variable, the first of its label_values over the window (empty when there are none, which
// matches series without the label, as certdrift's local mode has no namespace). overrides wins.
func resolveVars(ctx context.Context, q querier, d dashboard, win window, rateInterval time.Duration, overrides map[string]string) (map[string]string, error) {
	vars := builtinVars(win, rateInterval)
	for _, v := range d.Templating.List {
		if o, ok := overrides[v.Name]; ok {
			vars[v.Name] = o
			continue
		}
		switch {
		case v.Type == "datasource":
			vars[v.Name] = "prometheus"
		case v.IncludeAll || v.Multi:
			vars[v.Name] = ".*"
		case v.Type == "query":
			m := labelValuesQuery.FindStringSubmatch(variableQuery(v))
			if m == nil {
				return nil, fmt.Errorf("dashboard %s: variable %s: query %q is not label_values(selector, label); pass -var %s=value", d.UID, v.Name, variableQuery(v), v.Name)
			}
			// The selector may use variables defined before this one, as in Grafana.
			sel, err := substitute(m[1], vars)
			if err != nil {
				return nil, fmt.Errorf("dashboard %s: variable %s: %w", d.UID, v.Name, err)
			}
			vals, err := q.LabelValues(ctx, m[2], sel, win)
			if err != nil {
				return nil, fmt.Errorf("dashboard %s: variable %s: %w", d.UID, v.Name, err)
			}
			vars[v.Name] = ""
			if len(vals) > 0 {
				vars[v.Name] = vals[0]
			}
		default:
			return nil, fmt.Errorf("dashboard %s: variable %s of type %q: no default; pass -var %s=value", d.UID, v.Name, v.Type, v.Name)
		}
	}
	return vars, nil
}

// evaluate runs every visible target of every panel. A failing query is kept as that target's
// error and drawn in its panel: one bad query must not hide the rest of the dashboard.
func evaluate(ctx context.Context, q querier, d dashboard, vars map[string]string, win window) []panelResult {
	var out []panelResult
	for _, p := range flatten(d.Panels) {
		pr := panelResult{Panel: p}
		for _, t := range p.Targets {
			if t.Hide || t.Expr == "" {
				continue
			}
			tr := targetResult{Target: t}
			tr.Expr, tr.Err = substitute(t.Expr, vars)
			if tr.Err == nil {
				if instant(p, t) {
					tr.Series, tr.Err = q.Instant(ctx, tr.Expr, win.End)
				} else {
					tr.Series, tr.Err = q.Range(ctx, tr.Expr, win)
				}
			}
			if tr.Err != nil {
				tr.Err = fmt.Errorf("panel %q target %s: %w", p.Title, t.RefID, tr.Err)
			}
			pr.Results = append(pr.Results, tr)
		}
		out = append(out, pr)
	}
	return out
}
