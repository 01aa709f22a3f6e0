package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/alerts/metricnames"
)

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Datasource  *datasource     `json:"datasource"`
	GridPos     gridPos         `json:"gridPos"`
	Targets     []target        `json:"targets"`
	Panels      []panel         `json:"panels"` // a collapsed row's panels
	FieldConfig json.RawMessage `json:"fieldConfig"`
}

type gridPos struct{ X, Y, W, H int }

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *datasource `json:"datasource"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasource     `json:"datasource"`
}

func load(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := fs.Glob(Files, "*.json")
	if err != nil || len(files) < 2 {
		t.Fatalf("want the overview and the drill-down, found %v (%v)", files, err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := Files.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: not valid dashboard JSON: %v", f, err)
		}
		out[f] = d
	}
	return out
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

var builtinVars = []string{"__rate_interval", "__interval", "__range", "__range_s", "__interval_ms"}

var varRef = regexp.MustCompile(`\$\{?([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)`)

func TestStructure(t *testing.T) {
	uids := map[string]string{}
	for f, d := range load(t) {
		t.Run(f, func(t *testing.T) {
			if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
				t.Errorf("uid %q, title %q, schemaVersion %d: all required", d.UID, d.Title, d.SchemaVersion)
			}
			if other, dup := uids[d.UID]; dup {
				t.Errorf("uid %q also used by %s", d.UID, other)
			}
			uids[d.UID] = f
			vars := map[string]bool{}
			hasDS := false
			for _, v := range d.Templating.List {
				vars[v.Name] = true
				if v.Type == "datasource" {
					var q string
					_ = json.Unmarshal(v.Query, &q)
					hasDS = v.Name == "datasource" && q == "prometheus"
				}
			}
			if !hasDS {
				t.Errorf("no datasource variable named datasource of type prometheus: the dashboard would be bound to one Grafana's data source")
			}
			ids := map[int]bool{}
			var boxes []panel
			for _, p := range allPanels(d.Panels) {
				if ids[p.ID] || p.ID == 0 {
					t.Errorf("panel %q: id %d is zero or not unique", p.Title, p.ID)
				}
				ids[p.ID] = true
				g := p.GridPos
				if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
					t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
				}
				for _, o := range boxes {
					if g.X < o.GridPos.X+o.GridPos.W && o.GridPos.X < g.X+g.W && g.Y < o.GridPos.Y+o.GridPos.H && o.GridPos.Y < g.Y+g.H {
						t.Errorf("panel %q overlaps panel %q", p.Title, o.Title)
					}
				}
				boxes = append(boxes, p)
				if p.Type == "row" {
					continue
				}
				if p.Title == "" || p.Description == "" {
					t.Errorf("panel %d: title %q and a description are required", p.ID, p.Title)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no queries", p.Title)
				}
				if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
				}
				for _, tg := range p.Targets {
					if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
						t.Errorf("panel %q query %s: datasource %+v, want uid ${datasource}", p.Title, tg.RefID, tg.Datasource)
					}
					if regexp.MustCompile(`\b(rate|irate)\([^\[]*\[(?:[^$\]][^\]]*)\]`).MatchString(tg.Expr) {
						t.Errorf("panel %q query %s: rate()/irate() should use [$__rate_interval]: %s", p.Title, tg.RefID, tg.Expr)
					}
					for _, m := range varRef.FindAllStringSubmatch(tg.Expr, -1) {
						name := m[1] + m[2]
						if !vars[name] && !slices.Contains(builtinVars, name) {
							t.Errorf("panel %q query %s: variable $%s is not defined", p.Title, tg.RefID, name)
						}
					}
				}
			}
		})
	}
}

var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// TestQueriesDocumented holds every panel query and every variable query to docs/metrics.md and
// docs/findings.md, with the checker the alerts use.
func TestQueriesDocumented(t *testing.T) {
	doc, codes := docs(t)
	for f, d := range load(t) {
		for _, p := range allPanels(d.Panels) {
			for _, tg := range p.Targets {
				for _, err := range doc.Check(tg.Expr, codes) {
					t.Errorf("%s: panel %q query %s: %v", f, p.Title, tg.RefID, err)
				}
			}
		}
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Errorf("%s: variable %s: query: %v", f, v.Name, err)
				continue
			}
			expr, label := q.Query, ""
			if m := labelValues.FindStringSubmatch(q.Query); m != nil {
				expr, label = m[1], m[2]
			}
			errs := doc.Check(expr, codes)
			if label != "" {
				errs = append(errs, checkLabel(doc, expr, label)...)
			}
			for _, err := range errs {
				t.Errorf("%s: variable %s: %v", f, v.Name, err)
			}
		}
	}
}

// checkLabel: label_values(metric, label) must name a label the metric carries.
func checkLabel(doc metricnames.Doc, expr, label string) []error {
	p, err := metricnames.Parse(expr)
	if err != nil {
		return []error{err}
	}
	for _, s := range p.Selectors {
		if _, labels, ok := doc.Resolve(s.Metric); ok && !slices.Contains(labels, label) && !slices.Contains(metricnames.TargetLabels, label) {
			return []error{fmt.Errorf("label_values: %s has no label %q", s.Metric, label)}
		}
	}
	return nil
}

func docs(t *testing.T) (metricnames.Doc, map[string]bool) {
	t.Helper()
	m, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := metricnames.ReadDoc(bytes.NewReader(m))
	if err != nil {
		t.Fatalf("docs/metrics.md: %v", err)
	}
	f, err := os.ReadFile("../docs/findings.md")
	if err != nil {
		t.Fatal(err)
	}
	codes, err := metricnames.ReadCodes(strings.NewReader(string(f)))
	if err != nil {
		t.Fatalf("docs/findings.md: %v", err)
	}
	return doc, codes
}

// TestQueriesParseWithPromtool gives every panel query, with its Grafana variables replaced by
// sample values, to promtool as a recording rule: `promtool check rules` runs Prometheus' own
// PromQL parser, which the tokenizer of alerts/metricnames only approximates.
func TestQueriesParseWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if _, statErr := os.Stat("/usr/bin/promtool"); statErr != nil {
			t.Fatal("promtool not found on PATH or at /usr/bin/promtool: install it with `apt-get install prometheus`")
		}
		promtool = "/usr/bin/promtool"
	}
	sample := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
		"$job", ".*", "$namespace", "shop", "$envoy", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	n := 0
	for f, d := range load(t) {
		for _, p := range allPanels(d.Panels) {
			for _, tg := range p.Targets {
				n++
				expr, _ := json.Marshal(sample.Replace(tg.Expr)) // a JSON string is a YAML string
				fmt.Fprintf(&rules, "      - record: dashboard:query_%d # %s %q %s\n        expr: %s\n", n, f, p.Title, tg.RefID, expr)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "queries.rules.yaml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the dashboards' queries: %v\n%s\n%s", err, out, rules.String())
	}
	if !strings.Contains(string(out), fmt.Sprintf("SUCCESS: %d rules found", n)) {
		t.Errorf("promtool did not check all %d queries:\n%s", n, out)
	}
}

// notFiltered is what a panel's description says when none of its metrics has a namespace label.
const notFiltered = "Not filtered by namespace"

// namespaceProblems: a panel whose queries select a metric with a namespace label must restrict
// at least one selector of each such query by $namespace (namespace=~"$namespace", or a source
// matcher built from it), or the panel ignores the dashboard's namespace picker; a panel whose
// metrics have no namespace label must say so in its description, so that nobody reads its
// number as the selected namespaces'.
func namespaceProblems(doc metricnames.Doc, p panel) []string {
	var problems []string
	carries := false
	for _, tg := range p.Targets {
		parsed, err := metricnames.Parse(tg.Expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("query %s: %v", tg.RefID, err))
			continue
		}
		withNS, filtered := false, false
		for _, s := range parsed.Selectors {
			if _, labels, ok := doc.Resolve(s.Metric); ok && slices.Contains(labels, "namespace") {
				withNS = true
			}
			for _, m := range s.Matchers {
				if strings.Contains(m.Value, "$namespace") || strings.Contains(m.Value, "${namespace}") {
					filtered = true
				}
			}
		}
		carries = carries || withNS
		if withNS && !filtered {
			problems = append(problems, fmt.Sprintf("query %s selects a metric with a namespace label but does not filter by $namespace: %s", tg.RefID, tg.Expr))
		}
	}
	if !carries && !strings.Contains(p.Description, notFiltered) {
		problems = append(problems, fmt.Sprintf("no query has a namespace label to filter by, and the description does not say %q", notFiltered))
	}
	return problems
}

// TestPanelsHonourNamespace holds every panel of both dashboards to namespaceProblems, and
// shows that it catches a tile that ignores $namespace and one that hides that it cannot.
func TestPanelsHonourNamespace(t *testing.T) {
	doc, _ := docs(t)
	for f, d := range load(t) {
		for _, p := range allPanels(d.Panels) {
			if p.Type == "row" {
				continue
			}
			for _, problem := range namespaceProblems(doc, p) {
				t.Errorf("%s: panel %q: %s", f, p.Title, problem)
			}
		}
	}
	controls := map[string]panel{
		"IgnoresNamespace": {Title: "Critical findings", Description: "Active critical findings.",
			Targets: []target{{RefID: "A", Expr: `count(certdrift_finding{job=~"$job", severity="critical"})`}}},
		"SilentFleetWide": {Title: "Rotations converging", Description: "Pending rotations.",
			Targets: []target{{RefID: "A", Expr: `sum(certdrift_bindings_converging{job=~"$job"})`}}},
	}
	for name, p := range controls {
		if got := namespaceProblems(doc, p); len(got) == 0 {
			t.Errorf("control %s: no problem found in %+v", name, p)
		}
	}
}

// stateProblems: a panel that reads certdrift_bindings_converging (converging, stale or unknown
// since a change) must not be named after one binding state, and one that reads
// certdrift_bindings{state="x"} must name x (issue 16: "Rotations converging" read the former
// beside Bindings by state, whose converging line disagreed with it).
func stateProblems(p panel) []string {
	var problems []string
	for _, tg := range p.Targets {
		if strings.Contains(tg.Expr, "certdrift_bindings_converging") &&
			regexp.MustCompile(`(?i)\b(converging|stale|converged|unknown)\b`).MatchString(p.Title) {
			problems = append(problems, "reads certdrift_bindings_converging (pending rotations in any state) but its title names one binding state")
		}
		if m := regexp.MustCompile(`certdrift_bindings\{[^}]*state="(\w+)"`).FindStringSubmatch(tg.Expr); m != nil &&
			!strings.Contains(strings.ToLower(p.Title), m[1]) {
			problems = append(problems, fmt.Sprintf("reads certdrift_bindings{state=%q} but its title does not say %s", m[1], m[1]))
		}
	}
	return problems
}

func TestPanelTitlesMatchStates(t *testing.T) {
	for f, d := range load(t) {
		for _, p := range allPanels(d.Panels) {
			for _, problem := range stateProblems(p) {
				t.Errorf("%s: panel %q: %s", f, p.Title, problem)
			}
		}
	}
	controls := []panel{
		{Title: "Rotations converging", Targets: []target{{Expr: `sum(certdrift_bindings_converging{job=~"$job"})`}}},
		{Title: "Bindings pending", Targets: []target{{Expr: `sum(certdrift_bindings{job=~"$job", state="converging"})`}}},
	}
	for _, p := range controls {
		if len(stateProblems(p)) == 0 {
			t.Errorf("control %q: no problem found", p.Title)
		}
	}
}
