package alerts

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/certdrift/certdrift/alerts/metricnames"
)

// catchAll is the alert that pages on critical findings whose code has no alert of its own.
const catchAll = "CertdriftCriticalFinding"

// minKeepFiringFor is the least keep_firing_for a finding-based alert may have: longer than a
// restart of certdrift leaves its findings absent (pod start, informer sync, first round), and
// many times a missed round (--interval 30s) at a 30s–1m scrape interval.
const minKeepFiringFor = 5 * time.Minute

// noKeepFiringFor are the alerts that need no keep_firing_for, and why: a one-sample gap in what
// they read cannot clear them, or clearing is right.
var noKeepFiringFor = map[string]string{
	"CertdriftAbsent":                  "absent() fires on the gap itself",
	"CertdriftNotAuditing":             "its second branch (build_info without a round) covers a restart; a round timestamp that reappears is the resolution",
	"CertdriftKubernetesRequestErrors": "rate() over 10m rides out a missed scrape and a counter reset",
	"CertdriftRepairFailing":           "increase() over 1h rides out a missed scrape and a counter reset",
	"CertdriftConfigReloadFailed":      "a restart reloads --config; the gauge that comes back says whether that worked",
}

// auditCodes reads the finding codes from package audit's source (every constant of type Code):
// the codes the program can emit, not a copy of them.
func auditCodes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("../audit/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for _, v := range vs.Values {
					lit := v
					typed := false
					if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Code" {
						typed = true
					}
					// Code("X") as well as `X Code = "X"`.
					if call, ok := v.(*ast.CallExpr); ok && len(call.Args) == 1 {
						if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "Code" {
							typed, lit = true, call.Args[0]
						}
					}
					bl, ok := lit.(*ast.BasicLit)
					if !typed || !ok || bl.Kind != token.STRING {
						continue
					}
					c, err := strconv.Unquote(bl.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes = append(codes, c)
				}
			}
		}
	}
	if len(codes) < 10 {
		t.Fatalf("found only %d finding codes in ../audit (%v): the parser above no longer matches how codes are declared", len(codes), codes)
	}
	slices.Sort(codes)
	return codes
}

// findingSelection is what one alert selects of certdrift_finding.
type findingSelection struct {
	codes    []string // code="X" / code=~"X|Y"; nil when the alert does not name codes
	excluded []string // code!~"X|Y" / code!="X"
	critical bool     // the selector admits severity="critical"
	severity string   // the value of severity="X", "" for none or another operator
	label    string   // the rule's severity label
}

// selections parses each alert's expression and returns what it selects of certdrift_finding,
// by alert name (all rules of one name together).
func selections(t *testing.T, rules []rule) map[string][]findingSelection {
	t.Helper()
	out := map[string][]findingSelection{}
	for _, r := range rules {
		p, err := metricnames.Parse(r.Expr)
		if err != nil {
			t.Fatalf("%s: %v", r.Alert, err)
		}
		for _, s := range p.Selectors {
			if s.Metric != "certdrift_finding" {
				continue
			}
			sel := findingSelection{critical: true, label: r.Labels["severity"]}
			for _, m := range s.Matchers {
				switch {
				case m.Label == "code" && (m.Op == "=" || m.Op == "=~"):
					sel.codes = append(sel.codes, strings.Split(m.Value, "|")...)
				case m.Label == "code":
					sel.excluded = append(sel.excluded, strings.Split(m.Value, "|")...)
				case m.Label == "severity":
					sel.critical = matchesLiteral(m, "critical")
					if m.Op == "=" {
						sel.severity = m.Value
					}
				}
			}
			out[r.Alert] = append(out[r.Alert], sel)
		}
	}
	return out
}

// matchesLiteral: whether a matcher on label values admits v (values are literal alternatives).
func matchesLiteral(m metricnames.Matcher, v string) bool {
	in := slices.Contains(strings.Split(m.Value, "|"), v)
	switch m.Op {
	case "=":
		return m.Value == v
	case "!=":
		return m.Value != v
	case "=~":
		return in
	default: // !~
		return !in
	}
}

// coverageProblems holds every finding code to the rules: each has an alert that selects it, or
// an exemption; the catch-all excludes exactly the codes whose own alert takes their critical
// findings (fewer would page twice, more would page never); exemptions name real codes that
// have no alert.
func coverageProblems(codes []string, sel map[string][]findingSelection, exempt map[string]string) []string {
	var problems []string
	alerted := map[string][]string{} // code → alerts that select it
	var ownCritical, excluded []string
	catchAllSeen := false
	for name, ss := range sel {
		for _, s := range ss {
			if name == catchAll {
				catchAllSeen = true
				if s.codes != nil || !s.critical {
					problems = append(problems, catchAll+" must select critical findings of every code but some (code!~), nothing else")
				}
				excluded = append(excluded, s.excluded...)
				continue
			}
			if s.codes == nil {
				problems = append(problems, name+": a finding alert must name its codes (code=\"X\"); only "+catchAll+" selects by exclusion")
			}
			if s.severity != s.label {
				problems = append(problems, name+" ("+s.label+"): selects findings of severity \""+s.severity+"\"; select severity=\""+s.label+"\" so that findings page at their own severity")
			}
			for _, c := range s.codes {
				alerted[c] = append(alerted[c], name)
				if s.critical {
					ownCritical = append(ownCritical, c)
				}
			}
		}
	}
	if !catchAllSeen {
		problems = append(problems, "no "+catchAll+": critical findings of codes without an alert of their own page nowhere")
	}
	for _, c := range codes {
		_, ex := exempt[c]
		switch {
		case len(alerted[c]) == 0 && !ex:
			problems = append(problems, c+": no alert selects this finding code, and docs/runbooks.md does not list it among the findings without an alert of their own")
		case len(alerted[c]) > 0 && ex:
			problems = append(problems, c+": exempted in docs/runbooks.md, but "+strings.Join(alerted[c], ", ")+" alerts on it: drop the exemption")
		}
	}
	for c := range exempt {
		if !slices.Contains(codes, c) {
			problems = append(problems, c+": exempted in docs/runbooks.md but package audit has no such code")
		}
	}
	for c := range alerted {
		if !slices.Contains(codes, c) {
			problems = append(problems, c+": alerted on, but package audit has no such code")
		}
	}
	norm := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return slices.Compact(s) }
	if d := cmp.Diff(norm(ownCritical), norm(excluded)); d != "" {
		problems = append(problems, catchAll+"'s code!~ list differs from the codes whose own alert takes their critical findings (-own alert +excluded):\n"+d)
	}
	return problems
}

// exemptions reads the table of docs/runbooks.md's section "Findings without an alert of their
// own": `| `CODE` | why | what covers it |`.
func exemptions(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	in := false
	row := regexp.MustCompile("^\\| `([A-Z_]+)` \\|([^|]+)\\|")
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := sc.Text()
		if h, ok := strings.CutPrefix(l, "## "); ok {
			in = h == "Findings without an alert of their own"
			continue
		}
		if m := row.FindStringSubmatch(l); in && m != nil {
			out[m[1]] = strings.TrimSpace(m[2])
		}
	}
	if len(out) == 0 {
		t.Fatal(`docs/runbooks.md: no rows in section "## Findings without an alert of their own"`)
	}
	return out
}

// TestEveryFindingCodeAlerted: a finding code added to package audit fails here until it has an
// alert or a documented exemption, and the catch-all stays exact.
func TestEveryFindingCodeAlerted(t *testing.T) {
	codes := auditCodes(t)
	rules := loadRules(t)
	exempt := exemptions(t)
	for _, p := range coverageProblems(codes, selections(t, rules), exempt) {
		t.Error(p)
	}

	// Control cases: each way to break the rules is caught.
	t.Run("Controls", func(t *testing.T) {
		without := func(name string) []rule {
			var out []rule
			for _, r := range rules {
				if r.Alert != name {
					out = append(out, r)
				}
			}
			return out
		}
		cases := map[string]struct {
			codes  []string
			rules  []rule
			exempt map[string]string
			want   string
		}{
			"NewCode":             {append(slices.Clone(codes), "BRAND_NEW"), rules, exempt, "BRAND_NEW: no alert selects"},
			"AlertRemoved":        {codes, without("CertdriftHostnameMismatch"), exempt, "HOSTNAME_MISMATCH: no alert selects"},
			"CatchAllRemoved":     {codes, without(catchAll), exempt, "no " + catchAll},
			"StaleExemption":      {codes, rules, map[string]string{"STALE_SERVED": "x", "PARSE_ERROR": "x", "SOURCE_MISSING": "x", "UNREACHABLE": "x", "LINGERING_CONTEXT": "x"}, "STALE_SERVED: exempted"},
			"ExemptionOfNoCode":   {codes, rules, map[string]string{"GONE": "x", "PARSE_ERROR": "x", "SOURCE_MISSING": "x", "UNREACHABLE": "x", "LINGERING_CONTEXT": "x"}, "GONE: exempted"},
			"CatchAllWouldDouble": {codes, without("CertdriftKeyMismatch"), merge(exempt, "KEY_MISMATCH"), "differs from the codes"},
			"SeverityRaised":      {codes, relabel(rules, "CertdriftChainIncomplete", "critical"), exempt, "select severity=\"critical\""},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				got := coverageProblems(tc.codes, selections(t, tc.rules), tc.exempt)
				if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, tc.want) }) {
					t.Errorf("want a problem containing %q, got %q", tc.want, got)
				}
			})
		}
	})
}

// relabel returns rules with alert name's severity label set to sev.
func relabel(rules []rule, name, sev string) []rule {
	out := slices.Clone(rules)
	for i, r := range out {
		if r.Alert == name {
			out[i].Labels = map[string]string{"severity": sev}
		}
	}
	return out
}

func merge(m map[string]string, code string) map[string]string {
	out := map[string]string{code: "x"}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// keepFiringProblems: every alert that reads certdrift_finding keeps firing for at least
// minKeepFiringFor across a gap; every other alert does too unless noKeepFiringFor says why not.
func keepFiringProblems(rules []rule, sel map[string][]findingSelection, exempt map[string]string) []string {
	var problems []string
	for _, r := range rules {
		_, findingBased := sel[r.Alert]
		why, ok := exempt[r.Alert]
		switch {
		case r.KeepFiringFor == "" && findingBased:
			problems = append(problems, r.Alert+" ("+r.Labels["severity"]+"): reads certdrift_finding but has no keep_firing_for: one round without the finding would resolve it")
		case r.KeepFiringFor == "" && !ok:
			problems = append(problems, r.Alert+" ("+r.Labels["severity"]+"): no keep_firing_for, and noKeepFiringFor does not say why it needs none")
		case r.KeepFiringFor != "" && ok:
			problems = append(problems, r.Alert+": has keep_firing_for, yet noKeepFiringFor exempts it ("+why+")")
		case r.KeepFiringFor != "":
			d, err := model.ParseDuration(r.KeepFiringFor)
			if err != nil {
				problems = append(problems, r.Alert+": keep_firing_for "+r.KeepFiringFor+": "+err.Error())
			} else if findingBased && time.Duration(d) < minKeepFiringFor {
				problems = append(problems, r.Alert+": keep_firing_for "+r.KeepFiringFor+" is shorter than a restart of certdrift ("+minKeepFiringFor.String()+")")
			}
		}
	}
	return problems
}

// TestKeepFiringFor holds the rules to keepFiringProblems, and shows it catches an alert that
// lost its keep_firing_for.
func TestKeepFiringFor(t *testing.T) {
	rules := loadRules(t)
	sel := selections(t, rules)
	for _, p := range keepFiringProblems(rules, sel, noKeepFiringFor) {
		t.Error(p)
	}
	names := map[string]bool{}
	for _, r := range rules {
		names[r.Alert] = true
	}
	for a := range noKeepFiringFor {
		if !names[a] {
			t.Errorf("noKeepFiringFor names %s, which is not an alert", a)
		}
	}
	for i, r := range rules {
		if _, findingBased := sel[r.Alert]; !findingBased {
			continue
		}
		broken := slices.Clone(rules)
		broken[i].KeepFiringFor = ""
		if got := keepFiringProblems(broken, sel, noKeepFiringFor); len(got) != 1 {
			t.Errorf("control: %s without keep_firing_for gives %q, want one problem", r.Alert, got)
		}
		broken[i].KeepFiringFor = "1m"
		if got := keepFiringProblems(broken, sel, noKeepFiringFor); len(got) != 1 {
			t.Errorf("control: %s with keep_firing_for 1m gives %q, want one problem", r.Alert, got)
		}
	}
}

// TestGapCasesNeedKeepFiringFor strips keep_firing_for from every rule and runs the unit tests
// that have gaps in their input (stale markers): they must fail, or they do not test flapping.
func TestGapCasesNeedKeepFiringFor(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal(Rules, &doc); err != nil {
		t.Fatal(err)
	}
	n := stripKey(&doc, "keep_firing_for")
	if n == 0 {
		t.Fatal("no keep_firing_for in the rules")
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "tests"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "certdrift.rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var gaps []string
	for _, tf := range testFiles(t) {
		c, err := os.ReadFile(tf)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`values: '[^']*\bstale\b`).Match(c) {
			continue
		}
		gaps = append(gaps, tf)
		if err := os.WriteFile(filepath.Join(dir, tf), c, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(gaps) == 0 {
		t.Fatal("no unit test file has a stale sample in its input: nothing tests a gap")
	}
	out, err := runPromtool(t, dir, append([]string{"test", "rules"}, gaps...)...)
	if err == nil {
		t.Errorf("the gap cases in %v still pass without keep_firing_for (%d removed): they prove nothing\n%s", gaps, n, out)
	}
}

// stripKey removes every mapping entry named key, returning how many.
func stripKey(n *yaml.Node, key string) int {
	removed := 0
	if n.Kind == yaml.MappingNode {
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				removed++
				continue
			}
			kept = append(kept, n.Content[i], n.Content[i+1])
		}
		n.Content = kept
	}
	for _, c := range n.Content {
		removed += stripKey(c, key)
	}
	return removed
}
