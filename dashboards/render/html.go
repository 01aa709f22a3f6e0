package main

import (
	"fmt"
	"html"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Page geometry follows Grafana's grid: 24 columns across the page, rows of 30px with 8px gaps.
const (
	pageWidth  = 1600
	pagePad    = 16
	headerH    = 72
	cellH      = 30
	gap        = 8
	titleH     = 26
	footerH    = 28
	gridWidth  = pageWidth - 2*pagePad
	columnW    = float64(gridWidth) / 24
	rowPitch   = cellH + gap
	fontFamily = `"DejaVu Sans", "Liberation Sans", Arial, sans-serif`
)

// palette is Grafana's classic series palette, so colours look familiar to reviewers.
var palette = []string{"#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9", "#705DA0", "#508642", "#CCA300"}

// pageInfo is what the header says about the rendering.
type pageInfo struct {
	Dashboard dashboard
	Vars      map[string]string
	Window    window
	Note      string
}

// pageHeight is the browser window height that shows the whole dashboard.
func pageHeight(results []panelResult) int {
	bottom := 0
	for _, r := range results {
		if b := r.Panel.GridPos.Y + r.Panel.GridPos.H; b > bottom {
			bottom = b
		}
	}
	return headerH + bottom*rowPitch + footerH
}

// renderPage draws the dashboard as one self-contained HTML page (inline CSS and SVG).
func renderPage(info pageInfo, results []panelResult) string {
	var b strings.Builder
	h := pageHeight(results)
	fmt.Fprintf(&b, `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>%s</title><style>
body{margin:0;background:#f4f5f5;font-family:%s;color:#24292e;width:%dpx;height:%dpx;position:relative;overflow:hidden}
.hdr{position:absolute;left:%dpx;top:10px;right:%dpx}
.hdr h1{font-size:20px;margin:0 0 4px 0;font-weight:600}
.hdr .meta{font-size:12px;color:#555}
.panel{position:absolute;background:#fff;border:1px solid #dcdee0;border-radius:3px;overflow:hidden;box-sizing:border-box}
.panel .t{height:%dpx;line-height:%dpx;padding:0 8px;font-size:13px;font-weight:600;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.panel .b{position:absolute;left:0;right:0;bottom:0;top:%dpx;overflow:hidden}
.row{position:absolute;font-size:15px;font-weight:600;border-bottom:1px solid #c7d0d9;box-sizing:border-box;padding-top:6px}
.nodata{display:flex;align-items:center;justify-content:center;height:100%%;color:#8e8e8e;font-size:14px}
.err{color:#c4162a;font-size:11px;padding:6px 8px;white-space:pre-wrap;word-break:break-all}
.stat{display:flex;flex-wrap:wrap;height:100%%}
.stat div{flex:1 1 0;display:flex;flex-direction:column;align-items:center;justify-content:center;min-width:0}
.stat .v{font-weight:600;line-height:1;white-space:nowrap}
.stat .l{font-size:12px;color:#555;margin-top:4px}
table{border-collapse:collapse;width:100%%;font-size:11.5px;table-layout:fixed}
th{text-align:left;background:#f1f3f5;padding:3px 6px;font-weight:600;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
td{padding:3px 6px;border-top:1px solid #eceef0;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.more{font-size:11px;color:#666;padding:2px 6px}
.lg{font-size:11px;padding:0 8px;display:flex;flex-wrap:wrap;gap:2px 12px;overflow:hidden}
.lg span i{display:inline-block;width:10px;height:3px;margin-right:4px;vertical-align:middle}
.bar{display:flex;align-items:center;font-size:12px;padding:2px 8px}
.bar .n{width:40%%;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.bar .g{flex:1;height:14px;background:#eef0f2;margin:0 8px}
.bar .g i{display:block;height:100%%;background:#73BF69}
.foot{position:absolute;left:%dpx;bottom:6px;font-size:11px;color:#777}
</style></head><body>
`, esc(info.Dashboard.Title), fontFamily, pageWidth, h, pagePad, pagePad, titleH, titleH, titleH, pagePad)
	fmt.Fprintf(&b, `<div class="hdr"><h1>%s</h1><div class="meta">%s</div><div class="meta">%s</div></div>
`, esc(info.Dashboard.Title), esc(windowText(info.Window)+" · "+varsText(info.Dashboard, info.Vars)), esc(info.Note))
	for _, r := range results {
		b.WriteString(renderPanel(r))
	}
	fmt.Fprintf(&b, `<div class="foot">uid %s · a review rendering by dashboards/render (queries run on Prometheus, drawn without Grafana)</div>
</body></html>
`, esc(info.Dashboard.UID))
	return b.String()
}

func esc(s string) string { return html.EscapeString(s) }

func windowText(w window) string {
	return fmt.Sprintf("%s – %s UTC (%s, step %s)", w.Start.UTC().Format("2006-01-02 15:04:05"),
		w.End.UTC().Format("15:04:05"), w.End.Sub(w.Start).Round(time.Second), w.Step)
}

func varsText(d dashboard, vars map[string]string) string {
	var parts []string
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			continue
		}
		val := vars[v.Name]
		switch val {
		case ".*":
			val = "All"
		case "":
			val = `"" (none)`
		}
		parts = append(parts, v.Name+"="+val)
	}
	return strings.Join(parts, "  ")
}

// box is a panel's position on the page in pixels.
type box struct{ X, Y, W, H int }

func panelBox(g gridPos) box {
	x := pagePad + int(math.Round(float64(g.X)*columnW))
	right := pagePad + int(math.Round(float64(g.X+g.W)*columnW)) - gap
	return box{X: x, Y: headerH + g.Y*rowPitch, W: right - x, H: g.H*rowPitch - gap}
}

func renderPanel(r panelResult) string {
	p := r.Panel
	bx := panelBox(p.GridPos)
	if p.Type == "row" {
		return fmt.Sprintf(`<div class="row" style="left:%dpx;top:%dpx;width:%dpx;height:%dpx">%s</div>
`, bx.X, bx.Y, bx.W, bx.H+gap, esc(p.Title))
	}
	body := box{W: bx.W - 2, H: bx.H - titleH - 2}
	var inner string
	switch p.Type {
	case "stat":
		inner = renderStat(r, body)
	case "table":
		inner = renderTable(r, body)
	case "bargauge":
		inner = renderBars(r, body)
	case "timeseries":
		inner = renderTimeseries(r, body)
	case "heatmap":
		inner = renderHeatmap(r, body)
	case "state-timeline":
		inner = renderStateTimeline(r, body)
	default:
		inner = fmt.Sprintf(`<div class="nodata">panel type %q is not drawn by this renderer</div>`, esc(p.Type))
	}
	var errs strings.Builder
	for _, t := range r.Results {
		if t.Err != nil {
			fmt.Fprintf(&errs, `<div class="err">%s</div>`, esc(t.Err.Error()))
		}
	}
	return fmt.Sprintf(`<div class="panel" data-id="%d" data-type="%s" style="left:%dpx;top:%dpx;width:%dpx;height:%dpx"><div class="t">%s</div><div class="b">%s%s</div></div>
`, p.ID, esc(p.Type), bx.X, bx.Y, bx.W, bx.H, esc(p.Title), errs.String(), inner)
}

const noData = `<div class="nodata">No data</div>`

// named is one series with its display name.
type named struct {
	Name string
	S    series
}

// seriesOf lists every series of a panel's targets with Grafana-style display names.
func seriesOf(r panelResult) []named {
	var out []named
	for _, t := range r.Results {
		for _, s := range t.Series {
			out = append(out, named{Name: legend(t.Target.LegendFormat, s.Labels), S: s})
		}
	}
	return out
}

var legendRef = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// legend applies a legendFormat; without one Grafana shows the series' labels.
func legend(format string, labels map[string]string) string {
	if strings.TrimSpace(format) == "" || format == "__auto" {
		return labelsText(labels)
	}
	return strings.TrimSpace(legendRef.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendRef.FindStringSubmatch(m)[1]]
	}))
}

func labelsText(labels map[string]string) string {
	keys := sortedKeys(labels)
	var parts []string
	for _, k := range keys {
		if k != "__name__" {
			parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
		}
	}
	return labels["__name__"] + "{" + strings.Join(parts, ", ") + "}"
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func last(s series) float64 {
	if len(s.Points) == 0 {
		return math.NaN()
	}
	return s.Points[len(s.Points)-1].V
}

func renderStat(r panelResult, body box) string {
	ns := seriesOf(r)
	if len(ns) == 0 {
		return noData
	}
	unit := r.Panel.FieldConfig.Defaults.Unit
	cellW := body.W / len(ns)
	var b strings.Builder
	b.WriteString(`<div class="stat">`)
	for i, n := range ns {
		v := formatValue(last(n.S), unit)
		size := math.Min(float64(body.H)*0.45, 1.6*float64(cellW-8)/float64(max(len([]rune(v)), 2)))
		size = math.Max(size, 12)
		fmt.Fprintf(&b, `<div><span class="v" style="font-size:%.0fpx;color:%s">%s</span><span class="l">%s</span></div>`,
			size, palette[i%len(palette)], esc(v), esc(n.Name))
	}
	b.WriteString(`</div>`)
	return b.String()
}

func renderTable(r panelResult, body box) string {
	ns := seriesOf(r)
	if len(ns) == 0 {
		return noData
	}
	excluded := map[string]bool{"__name__": true}
	for _, t := range r.Panel.Transformations {
		if t.ID == "organize" {
			for k, v := range t.Options.ExcludeByName {
				excluded[k] = v
			}
		}
	}
	colSet := map[string]string{}
	for _, n := range ns {
		for k := range n.S.Labels {
			colSet[k] = ""
		}
	}
	var cols []string
	for _, k := range sortedKeys(colSet) {
		if !excluded[k] {
			cols = append(cols, k)
		}
	}
	showValue := !excluded["Value"]
	unit := r.Panel.FieldConfig.Defaults.Unit
	rows := make([]tableRow, 0, len(ns))
	for _, n := range ns {
		var rw tableRow
		for _, c := range cols {
			rw.cells = append(rw.cells, n.S.Labels[c])
		}
		rw.v = last(n.S)
		if showValue {
			rw.cells = append(rw.cells, formatValue(rw.v, unit))
		}
		rows = append(rows, rw)
	}
	// Prometheus returns an instant vector in no useful order: sort on the labels, and on the
	// value first for durations (an expiry table reads soonest first), so runs are comparable.
	sort.SliceStable(rows, func(i, j int) bool {
		if (unit == "dtdurations" || unit == "s") && rows[i].v != rows[j].v {
			return rows[i].v < rows[j].v
		}
		return strings.Join(rows[i].cells, "\x00") < strings.Join(rows[j].cells, "\x00")
	})
	var b strings.Builder
	b.WriteString(`<table>`)
	header := cols
	if showValue {
		header = append(slices.Clip(header), "Value")
	}
	b.WriteString(colgroup(header, rows))
	b.WriteString(`<tr>`)
	for _, c := range header {
		fmt.Fprintf(&b, `<th>%s</th>`, esc(c))
	}
	b.WriteString(`</tr>`)
	fit := max((body.H-22)/21, 1)
	shown := rows
	if len(rows) > fit {
		shown = rows[:fit-1]
	}
	for _, rw := range shown {
		b.WriteString(`<tr>`)
		for _, c := range rw.cells {
			fmt.Fprintf(&b, `<td title="%s">%s</td>`, esc(c), esc(c))
		}
		b.WriteString(`</tr>`)
	}
	b.WriteString(`</table>`)
	if len(shown) < len(rows) {
		fmt.Fprintf(&b, `<div class="more">… %d more rows (Grafana scrolls)</div>`, len(rows)-len(shown))
	}
	return b.String()
}

type tableRow struct {
	cells []string
	v     float64
}

// colgroup shares the table's width by each column's longest text (capped), so a long column
// such as a fingerprint is cut with an ellipsis instead of pushing the others out of the panel.
func colgroup(header []string, rows []tableRow) string {
	widths := make([]int, len(header))
	total := 0
	for i, h := range header {
		w := len([]rune(h))
		for _, r := range rows {
			w = max(w, len([]rune(r.cells[i])))
		}
		widths[i] = min(max(w, 4), 40)
		total += widths[i]
	}
	var b strings.Builder
	b.WriteString(`<colgroup>`)
	for _, w := range widths {
		fmt.Fprintf(&b, `<col style="width:%.1f%%">`, 100*float64(w)/float64(total))
	}
	b.WriteString(`</colgroup>`)
	return b.String()
}

func renderBars(r panelResult, body box) string {
	ns := seriesOf(r)
	if len(ns) == 0 {
		return noData
	}
	sort.SliceStable(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
	top := 0.0
	for _, n := range ns {
		top = math.Max(top, last(n.S))
	}
	unit := r.Panel.FieldConfig.Defaults.Unit
	var b strings.Builder
	for _, n := range ns {
		frac := 0.0
		if top > 0 {
			frac = math.Max(last(n.S), 0) / top
		}
		fmt.Fprintf(&b, `<div class="bar"><span class="n">%s</span><span class="g"><i style="width:%.1f%%"></i></span><span>%s</span></div>`,
			esc(n.Name), 100*frac, esc(formatValue(last(n.S), unit)))
	}
	return b.String()
}

// chart is the plotting area inside a panel body.
type chart struct {
	W, H                   int
	left, right, top, bott int
	t0, t1                 time.Time
	lo, hi                 float64
}

func (c chart) x(t time.Time) float64 {
	span := c.t1.Sub(c.t0).Seconds()
	if span <= 0 {
		span = 1
	}
	return float64(c.left) + float64(c.W-c.left-c.right)*t.Sub(c.t0).Seconds()/span
}

func (c chart) y(v float64) float64 {
	return float64(c.top) + float64(c.H-c.top-c.bott)*(1-(v-c.lo)/(c.hi-c.lo))
}

// timeRange is the span of all points, which is the query window for range queries.
func timeRange(ns []named) (time.Time, time.Time) {
	var t0, t1 time.Time
	for _, n := range ns {
		for _, p := range n.S.Points {
			if t0.IsZero() || p.T.Before(t0) {
				t0 = p.T
			}
			if p.T.After(t1) {
				t1 = p.T
			}
		}
	}
	return t0, t1
}

func legendBlock(ns []named, unit string, width int) (string, int) {
	perLine := max(width/230, 1)
	lines := min((len(ns)+perLine-1)/perLine, 3)
	var b strings.Builder
	fmt.Fprintf(&b, `<div class="lg" style="height:%dpx">`, lines*15)
	for i, n := range ns {
		fmt.Fprintf(&b, `<span><i style="background:%s"></i>%s <b>%s</b></span>`, palette[i%len(palette)], esc(n.Name), esc(formatValue(last(n.S), unit)))
	}
	b.WriteString(`</div>`)
	return b.String(), lines*15 + 4
}

func renderTimeseries(r panelResult, body box) string {
	ns := seriesOf(r)
	if len(ns) == 0 {
		return noData
	}
	unit := r.Panel.FieldConfig.Defaults.Unit
	lg, lgH := legendBlock(ns, unit, body.W)
	c := chart{W: body.W, H: body.H - lgH, left: 64, right: 12, top: 6, bott: 18}
	c.t0, c.t1 = timeRange(ns)
	c.lo, c.hi = math.Inf(1), math.Inf(-1)
	for _, n := range ns {
		for _, p := range n.S.Points {
			if !math.IsNaN(p.V) && !math.IsInf(p.V, 0) {
				c.lo, c.hi = math.Min(c.lo, p.V), math.Max(c.hi, p.V)
			}
		}
	}
	if math.IsInf(c.lo, 0) {
		return noData
	}
	c.lo = math.Min(c.lo, 0)
	c.hi = niceMax(c.lo, c.hi, unit)
	step := minStep(ns)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d" xmlns="http://www.w3.org/2000/svg" font-size="10" font-family=%q>`, c.W, c.H, fontFamily)
	axes(&b, c, unit)
	for i, n := range ns {
		var d strings.Builder
		var prev time.Time
		for _, p := range n.S.Points {
			if math.IsNaN(p.V) || math.IsInf(p.V, 0) {
				prev = time.Time{}
				continue
			}
			cmd := "L"
			// Prometheus omits steps without a value; Grafana draws those as gaps.
			if prev.IsZero() || p.T.Sub(prev) > step*3/2 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f,%.1f ", cmd, c.x(p.T), c.y(p.V))
			prev = p.T
		}
		col := palette[i%len(palette)]
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"/>`, d.String(), col)
		if len(n.S.Points) == 1 {
			p := n.S.Points[0]
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`, c.x(p.T), c.y(p.V), col)
		}
	}
	b.WriteString(`</svg>`)
	b.WriteString(lg)
	return b.String()
}

// minStep is the smallest interval between consecutive points: the query step.
func minStep(ns []named) time.Duration {
	step := time.Duration(math.MaxInt64)
	for _, n := range ns {
		for i := 1; i < len(n.S.Points); i++ {
			if d := n.S.Points[i].T.Sub(n.S.Points[i-1].T); d > 0 && d < step {
				step = d
			}
		}
	}
	if step == time.Duration(math.MaxInt64) {
		return time.Second
	}
	return step
}

// axisStep is tickStep in the largest time unit that fits, for axes in seconds, so a year of
// validity is marked in round days rather than round numbers of seconds.
func axisStep(span float64, unit string) float64 {
	if unit == "s" || unit == "dtdurations" {
		for _, u := range []float64{86400, 3600, 60} {
			if span >= 2*u {
				return tickStep(span/u) * u
			}
		}
	}
	return tickStep(span)
}

// tickStep is a round step (1, 2, 2.5 or 5 times a power of ten) giving about four intervals.
func tickStep(span float64) float64 {
	raw := span / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// niceMax rounds the axis top up to a tick so grid lines fall on round values.
func niceMax(lo, hi float64, unit string) float64 {
	if hi <= lo {
		hi = lo + 1
	}
	st := axisStep(hi-lo, unit)
	return lo + math.Ceil((hi-lo)/st)*st
}

// axes draws horizontal grid lines with value labels and three time labels.
func axes(b *strings.Builder, c chart, unit string) {
	// Axis labels must fit the margin: long durations are shown in their largest unit.
	if unit == "dtdurations" {
		unit = "s"
	}
	st := axisStep(c.hi-c.lo, unit)
	for v := c.lo; v <= c.hi+st/1e6; v += st {
		y := c.y(v)
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e6e8ea"/>`, c.left, c.W-c.right, y, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#666">%s</text>`, c.left-4, y+3, esc(formatValue(v, unit)))
	}
	timeLabels(b, c)
}

func timeLabels(b *strings.Builder, c chart) {
	for i, anchor := range []string{"start", "middle", "end"} {
		t := c.t0.Add(time.Duration(float64(c.t1.Sub(c.t0)) * float64(i) / 2))
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="%s" fill="#666">%s</text>`, c.x(t), c.H-4, anchor, t.UTC().Format("15:04:05"))
	}
}

func renderHeatmap(r panelResult, body box) string {
	ns := seriesOf(r)
	if len(ns) == 0 {
		return noData
	}
	// Rows are histogram buckets, ordered by their upper bound.
	bound := func(n named) float64 {
		f, err := strconv.ParseFloat(n.S.Labels["le"], 64)
		if err != nil {
			return math.Inf(1)
		}
		return f
	}
	sort.SliceStable(ns, func(i, j int) bool { return bound(ns[i]) < bound(ns[j]) })
	ns = perBucket(ns)
	top := 0.0
	for _, n := range ns {
		for _, p := range n.S.Points {
			top = math.Max(top, p.V)
		}
	}
	unit := r.Panel.FieldConfig.Defaults.Unit
	c := chart{W: body.W, H: body.H - 16, left: 64, right: 12, top: 4, bott: 18}
	c.t0, c.t1 = timeRange(ns)
	step := minStep(ns)
	rowH := float64(c.H-c.top-c.bott) / float64(len(ns))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d" xmlns="http://www.w3.org/2000/svg" font-size="9" font-family=%q>`, c.W, c.H, fontFamily)
	cellW := math.Max(c.x(c.t0.Add(step))-c.x(c.t0), 1)
	for i, n := range ns {
		y := float64(c.H-c.bott) - float64(i+1)*rowH
		if rowH >= 9 || i%2 == 0 {
			le := n.S.Labels["le"]
			if f := bound(n); !math.IsInf(f, 1) {
				le = formatValue(f, unit)
			}
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#666">%s</text>`, c.left-4, y+rowH/2+3, esc(le))
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="#f7f8fa"/>`, c.left, y, c.W-c.left-c.right, math.Max(rowH-1, 0.5))
		for _, p := range n.S.Points {
			if p.V <= 0 || top <= 0 {
				continue
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#E0752D" fill-opacity="%.2f"/>`,
				c.x(p.T)-cellW/2, y, cellW, math.Max(rowH-1, 0.5), 0.15+0.85*p.V/top)
		}
	}
	timeLabels(&b, c)
	b.WriteString(`</svg>`)
	fmt.Fprintf(&b, `<div class="lg">rows: buckets (le); colour: count in the bucket per step, max %s</div>`, esc(formatValue(top, "short")))
	return b.String()
}

// perBucket turns Prometheus's cumulative buckets (le is "less or equal") into counts per
// bucket, as Grafana's heatmap does for format "heatmap"; ns is sorted by le.
func perBucket(ns []named) []named {
	out := make([]named, len(ns))
	prev := map[time.Time]float64{}
	for i, n := range ns {
		s := series{Labels: n.S.Labels}
		cur := map[time.Time]float64{}
		for _, p := range n.S.Points {
			cur[p.T] = p.V
			s.Points = append(s.Points, point{T: p.T, V: math.Max(p.V-prev[p.T], 0)})
		}
		prev = cur
		out[i] = named{Name: n.Name, S: s}
	}
	return out
}

func renderStateTimeline(r panelResult, body box) string {
	ns := seriesOf(r)
	if len(ns) == 0 {
		return noData
	}
	sort.SliceStable(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
	unit := r.Panel.FieldConfig.Defaults.Unit
	c := chart{W: body.W, H: body.H, left: 150, right: 12, top: 4, bott: 18}
	c.t0, c.t1 = timeRange(ns)
	step := minStep(ns)
	rowH := math.Min(float64(c.H-c.top-c.bott)/float64(len(ns)), 28)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d" xmlns="http://www.w3.org/2000/svg" font-size="11" font-family=%q>`, c.W, c.H, fontFamily)
	for i, n := range ns {
		y := float64(c.top) + float64(i)*rowH
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#333">%s</text>`, c.left-6, y+rowH/2+4, esc(truncate(n.Name, 24)))
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="#eef0f2"/>`, c.left, y+1, c.W-c.left-c.right, rowH-2)
		// One rectangle per run of equal values; a gap in the data ends a run.
		pts := n.S.Points
		for j := 0; j < len(pts); {
			k := j
			for k+1 < len(pts) && pts[k+1].V == pts[j].V && pts[k+1].T.Sub(pts[k].T) <= step*3/2 {
				k++
			}
			end := pts[k].T.Add(step)
			if end.After(c.t1) {
				end = c.t1
			}
			if k+1 < len(pts) && pts[k+1].T.Sub(pts[k].T) <= step*3/2 {
				end = pts[k+1].T
			}
			col := "#73BF69"
			if pts[j].V == 0 {
				col = "#F2495C"
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, c.x(pts[j].T), y+1, math.Max(c.x(end)-c.x(pts[j].T), 0.5), rowH-2, col)
			j = k + 1
		}
		if v := last(n.S); !math.IsNaN(v) {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#fff" font-weight="bold">%s</text>`, c.W-c.right-6, y+rowH/2+4, esc(formatValue(v, unit)))
		}
	}
	timeLabels(&b, c)
	b.WriteString(`</svg>`)
	return b.String()
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// formatValue formats a value in a Grafana unit; units not listed are shown as plain numbers.
func formatValue(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	switch unit {
	case "s":
		return seconds(v)
	case "dtdurations":
		return longDuration(v)
	case "ops":
		return number(v) + " ops/s"
	case "bool_yes_no":
		if v == 0 {
			return "No"
		}
		return "Yes"
	}
	return number(v)
}

func number(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	a := math.Abs(v)
	switch {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func seconds(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0 s"
	case a < 1e-3:
		return number(v*1e6) + " µs"
	case a < 1:
		return number(v*1e3) + " ms"
	case a < 60:
		return number(v) + " s"
	case a < 3600:
		return number(v/60) + " min"
	case a < 86400:
		return number(v/3600) + " hour"
	}
	return number(v/86400) + " day"
}

// longDuration writes the two largest units, as Grafana's dtdurations does ("89 days, 23 hours").
func longDuration(v float64) string {
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	units := []struct {
		name string
		secs float64
	}{{"year", 365 * 86400}, {"day", 86400}, {"hour", 3600}, {"minute", 60}, {"second", 1}}
	var parts []string
	for _, u := range units {
		n := math.Floor(v / u.secs)
		if n >= 1 || (len(parts) > 0) {
			if n >= 1 {
				name := u.name
				if n != 1 {
					name += "s"
				}
				parts = append(parts, fmt.Sprintf("%.0f %s", n, name))
			}
			v -= n * u.secs
			if len(parts) == 2 || (len(parts) == 1 && n < 1) {
				break
			}
		}
	}
	if len(parts) == 0 {
		return sign + seconds(v)
	}
	return sign + strings.Join(parts, ", ")
}
