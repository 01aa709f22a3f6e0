package alerts

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/certdrift/certdrift/alerts/metricnames"
)

// RunbookBase is where runbook_url annotations point: docs/runbooks.md on the default branch.
const RunbookBase = "https://github.com/certdrift/certdrift/blob/main/docs/runbooks.md#"

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(Rules))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("certdrift.rules.yaml: %v", err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("certdrift.rules.yaml: no rules")
	}
	return out
}

// promtool finds Debian's promtool (package prometheus), failing with how to get it: the rule
// tests are the point of this package, never skipped.
func promtool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/promtool"); err == nil {
		return "/usr/bin/promtool"
	}
	t.Fatal("promtool not found on PATH or at /usr/bin/promtool: install it with `apt-get install prometheus` (Debian's package ships promtool)")
	return ""
}

func runPromtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestPromtoolCheckRules(t *testing.T) {
	if out, err := runPromtool(t, ".", "check", "rules", "--lint=all", "--lint-fatal", "certdrift.rules.yaml"); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

func testFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("tests/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule unit tests under alerts/tests (%v)", err)
	}
	return files
}

func TestPromtoolTestRules(t *testing.T) {
	if out, err := runPromtool(t, ".", append([]string{"test", "rules"}, testFiles(t)...)...); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestUnitTestsCanFail removes one alert at a time from the rules and runs the unit tests
// against what is left: each removal must fail them, or that alert's firing case proves nothing.
func TestUnitTestsCanFail(t *testing.T) {
	var f yaml.Node
	if err := yaml.Unmarshal(Rules, &f); err != nil {
		t.Fatal(err)
	}
	tests := testFiles(t)
	names := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Alert != "" {
			names[r.Alert] = true
		}
	}
	for name := range names {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "tests"), 0o755); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := yaml.NewEncoder(&buf).Encode(withoutAlert(t, &f, name)); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "certdrift.rules.yaml"), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			// Only the files that test this alert: promtool takes seconds per file.
			var mine []string
			for _, tf := range tests {
				b, err := os.ReadFile(tf)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(b, []byte(name)) {
					continue
				}
				mine = append(mine, tf)
				if err := os.WriteFile(filepath.Join(dir, tf), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if len(mine) == 0 {
				t.Fatalf("no unit test file mentions %s", name)
			}
			out, err := runPromtool(t, dir, append([]string{"test", "rules"}, mine...)...)
			var exit *exec.ExitError
			if err == nil {
				t.Errorf("the unit tests still pass without %s: add a case where it fires", name)
			} else if !errors.As(err, &exit) {
				t.Fatalf("promtool: %v\n%s", err, out)
			}
		})
	}
}

// withoutAlert returns a deep copy of the rule file's document with every rule of alert name
// removed.
func withoutAlert(t *testing.T, doc *yaml.Node, name string) *yaml.Node {
	t.Helper()
	var c yaml.Node
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	groups := mapValue(c.Content[0], "groups")
	for _, g := range groups.Content {
		rules := mapValue(g, "rules")
		kept := rules.Content[:0]
		for _, r := range rules.Content {
			if a := mapValue(r, "alert"); a == nil || a.Value != name {
				kept = append(kept, r)
			}
		}
		rules.Content = kept
	}
	return &c
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// TestConventions holds each alert to the monitoring-mixins conventions and to its runbook.
func TestConventions(t *testing.T) {
	runbooks := readAnchors(t, "../docs/runbooks.md")
	alerts := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Record != "" {
			t.Errorf("recording rule %s: this file holds alerts only", r.Record)
			continue
		}
		alerts[r.Alert] = true
		if !regexp.MustCompile(`^Certdrift[A-Z][A-Za-z]+$`).MatchString(r.Alert) {
			t.Errorf("%s: alert names are CamelCase with the Certdrift prefix", r.Alert)
		}
		if s := r.Labels["severity"]; !slices.Contains([]string{"info", "warning", "critical"}, s) {
			t.Errorf("%s: severity label %q, want info, warning or critical", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: missing %s annotation", r.Alert, a)
			}
		}
		if s := r.Annotations["summary"]; strings.Contains(s, "{{") {
			t.Errorf("%s: summary %q is templated; keep it static, details go in description", r.Alert, s)
		}
		want := RunbookBase + strings.ToLower(r.Alert)
		if r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !runbooks[strings.ToLower(r.Alert)] {
			t.Errorf("%s: docs/runbooks.md has no section \"## %s\"", r.Alert, r.Alert)
		}
	}
	for a := range runbooks {
		if strings.HasPrefix(a, "certdrift") && !alertsLower(alerts)[a] {
			t.Errorf("docs/runbooks.md: section %q has no alert", a)
		}
	}
}

func alertsLower(m map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[strings.ToLower(k)] = true
	}
	return out
}

// readAnchors returns the GitHub anchors of a Markdown page's "## " headings.
func readAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the runbooks: %v", err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(l, "## "); ok {
			a := strings.ToLower(strings.TrimSpace(h))
			a = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(a, "")
			out[strings.ReplaceAll(a, " ", "-")] = true
		}
	}
	return out
}

// TestExpressionsDocumented holds every expression to docs/metrics.md and docs/findings.md.
func TestExpressionsDocumented(t *testing.T) {
	doc, codes := Docs(t, "..")
	for _, r := range loadRules(t) {
		for _, err := range doc.Check(r.Expr, codes) {
			t.Errorf("%s (severity %s): %v", r.Alert, r.Labels["severity"], err)
		}
	}
}

// Docs reads docs/metrics.md and docs/findings.md under root.
func Docs(t *testing.T, root string) (metricnames.Doc, map[string]bool) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := metricnames.ReadDoc(f)
	if err != nil {
		t.Fatalf("docs/metrics.md: %v", err)
	}
	g, err := os.Open(filepath.Join(root, "docs/findings.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	codes, err := metricnames.ReadCodes(g)
	if err != nil {
		t.Fatalf("docs/findings.md: %v", err)
	}
	return doc, codes
}

type unitTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `yaml:"exp_labels"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestEveryAlertHasBothCases: every alert at every severity has a unit test where it fires, and
// every alert one where, past its `for:` duration, it must not.
func TestEveryAlertHasBothCases(t *testing.T) {
	type key struct{ alert, severity string }
	fires := map[key]bool{}
	quietAfter := map[string]time.Duration{} // latest eval_time with no alert expected
	for _, tf := range testFiles(t) {
		b, err := os.ReadFile(tf)
		if err != nil {
			t.Fatal(err)
		}
		var u unitTests
		if err := yaml.Unmarshal(b, &u); err != nil {
			t.Fatalf("%s: %v", tf, err)
		}
		for _, tc := range u.Tests {
			for _, a := range tc.AlertRuleTest {
				at, err := model.ParseDuration(a.EvalTime)
				if err != nil {
					t.Fatalf("%s: eval_time %q: %v", tf, a.EvalTime, err)
				}
				if len(a.ExpAlerts) == 0 {
					quietAfter[a.Alertname] = max(quietAfter[a.Alertname], time.Duration(at))
				}
				for _, e := range a.ExpAlerts {
					fires[key{a.Alertname, e.ExpLabels["severity"]}] = true
				}
			}
		}
	}
	longest := map[string]time.Duration{}
	for _, r := range loadRules(t) {
		if !fires[key{r.Alert, r.Labels["severity"]}] {
			t.Errorf("%s (severity %s): no unit test where it fires", r.Alert, r.Labels["severity"])
		}
		var d model.Duration
		if r.For != "" {
			var err error
			if d, err = model.ParseDuration(r.For); err != nil {
				t.Fatalf("%s: for %q: %v", r.Alert, r.For, err)
			}
		}
		longest[r.Alert] = max(longest[r.Alert], time.Duration(d))
	}
	for a, d := range longest {
		if q, ok := quietAfter[a]; !ok || q <= d {
			t.Errorf("%s: no unit test where it must not fire after its for: %s", a, d)
		}
	}
}
