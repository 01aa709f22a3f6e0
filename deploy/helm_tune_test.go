package deploy

// Tests of what operators tune in the chart: golden renders per value set, the PrometheusRule
// overrides (each against the rule file, each render through promtool), GOMEMLIMIT as the Go
// runtime parses it, and the runtime, placement and scrape values.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/helm/*.yaml from the current chart")

// memLimitChildEnv makes the test binary a child that reports the Go runtime's memory limit
// (what it made of GOMEMLIMIT at start) and exits: see TestHelmGoMemLimit.
const memLimitChildEnv = "CERTDRIFT_TEST_REPORT_MEMORY_LIMIT"

func TestMain(m *testing.M) {
	if os.Getenv(memLimitChildEnv) == "1" {
		// SetMemoryLimit with a negative value only reads the limit.
		fmt.Println(debug.SetMemoryLimit(-1))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestHelmGolden compares each value set's `helm template` with testdata/helm/<case>.yaml.
// After an intended change: go test ./deploy -run TestHelmGolden -update, and read the diff.
func TestHelmGolden(t *testing.T) {
	for _, c := range helmCases {
		t.Run(c.name, func(t *testing.T) {
			got, _ := helmTemplateArgs(t, c.args())
			path := filepath.Join("testdata", "helm", c.name+".yaml")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v: create it with `go test ./deploy -run 'TestHelmGolden/%s$' -update`", err, c.name)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("helm template %s differs from %s (-golden +render); if intended, run `go test ./deploy -run TestHelmGolden -update`:\n%s", c.name, path, diff)
			}
		})
	}
}

// ruleFileGroups is alerts/certdrift.rules.yaml's groups, decoded as the rendered objects are.
func ruleFileGroups(t *testing.T) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "alerts", "certdrift.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return decodeGroups(t, b)
}

func decodeGroups(t *testing.T, b []byte) []any {
	t.Helper()
	var file map[string]any
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&file); err != nil {
		t.Fatalf("rule file: %v", err)
	}
	groups, ok := file["groups"].([]any)
	if !ok || len(groups) == 0 {
		t.Fatalf("rule file has no groups")
	}
	return groups
}

// renderedGroups renders the chart with the values and returns the PrometheusRule's spec.groups.
func renderedGroups(t *testing.T, dir string, valueArgs ...string) (*unstructured.Unstructured, []any) {
	t.Helper()
	args := append([]string{"template", release, dir, "--namespace", releaseNS, "--set", "prometheusRule.enabled=true"}, valueArgs...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	pr := find(decodeObjects(t, out), "PrometheusRule", releaseNS, release)
	if pr == nil {
		t.Fatal("no PrometheusRule")
	}
	groups, _, err := unstructured.NestedSlice(pr.Object, "spec", "groups")
	if err != nil {
		t.Fatal(err)
	}
	return pr, groups
}

// alerts yields every alerting rule (as a mutable map) of the groups.
func alerts(groups []any, fn func(r map[string]any)) {
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if m := r.(map[string]any); m["alert"] != nil {
				fn(m)
			}
		}
	}
}

func severity(r map[string]any) string {
	l, _ := r["labels"].(map[string]any)
	s, _ := l["severity"].(string)
	return s
}

// dropAlerts removes the alerts for which drop is true, and groups left empty.
func dropAlerts(groups []any, drop func(r map[string]any) bool) []any {
	var out []any
	for _, g := range groups {
		gm := g.(map[string]any)
		var rules []any
		for _, r := range gm["rules"].([]any) {
			if m := r.(map[string]any); m["alert"] == nil || !drop(m) {
				rules = append(rules, r)
			}
		}
		if len(rules) > 0 {
			gm["rules"] = rules
			out = append(out, gm)
		}
	}
	return out
}

// requireAlert fails unless the rule file has the alert (at the severity, if given): a case
// about an alert the file no longer has would pass without showing anything.
func requireAlert(t *testing.T, groups []any, name, sev string) {
	t.Helper()
	found := false
	alerts(groups, func(r map[string]any) {
		found = found || (r["alert"] == name && (sev == "" || severity(r) == sev))
	})
	if !found {
		t.Fatalf("alerts/certdrift.rules.yaml has no %s %s: pick another alert for this case", name, sev)
	}
}

func setIn(m map[string]any, key string, kv ...string) {
	sub, _ := m[key].(map[string]any)
	if sub == nil {
		sub = map[string]any{}
		m[key] = sub
	}
	for i := 0; i < len(kv); i += 2 {
		sub[kv[i]] = kv[i+1]
	}
}

// TestHelmRules renders the PrometheusRule with each override and compares its groups with the
// rule file changed by hand the way the override says; every render must pass promtool.
func TestHelmRules(t *testing.T) {
	const staleServed = "CertdriftStaleServedCertificate" // at warning and at critical
	const absent = "CertdriftAbsent"
	lastGroup := func(groups []any) map[string]any { return groups[len(groups)-1].(map[string]any) }
	cases := []struct {
		name   string
		reason string
		values string
		// want changes a copy of the file's groups into what the render must hold.
		want func(t *testing.T, groups []any) []any
	}{{
		name:   "NoOverrides",
		reason: "with no overrides the groups are the file's",
		values: "prometheusRule: {enabled: true}",
		want:   func(t *testing.T, g []any) []any { return g },
	}, {
		name:   "DisableByName",
		reason: "disabled by name removes every rule of that name",
		values: "prometheusRule: {alerts: {" + staleServed + ": {disabled: true}}}",
		want: func(t *testing.T, g []any) []any {
			requireAlert(t, g, staleServed, "")
			return dropAlerts(g, func(r map[string]any) bool { return r["alert"] == staleServed })
		},
	}, {
		name:   "DisableOneSeverity",
		reason: "name/severity addresses one of the two rules of a name",
		values: "prometheusRule: {alerts: {" + staleServed + "/warning: {disabled: true}}}",
		want: func(t *testing.T, g []any) []any {
			requireAlert(t, g, staleServed, "warning")
			requireAlert(t, g, staleServed, "critical")
			return dropAlerts(g, func(r map[string]any) bool { return r["alert"] == staleServed && severity(r) == "warning" })
		},
	}, {
		name:   "SpecificWins",
		reason: "name/severity wins over name field by field, false included",
		values: "prometheusRule: {alerts: {" + staleServed + ": {disabled: true, for: 1h}, " + staleServed + "/critical: {disabled: false}}}",
		want: func(t *testing.T, g []any) []any {
			g = dropAlerts(g, func(r map[string]any) bool { return r["alert"] == staleServed && severity(r) != "critical" })
			alerts(g, func(r map[string]any) {
				if r["alert"] == staleServed {
					r["for"] = "1h"
				}
			})
			return g
		},
	}, {
		name:   "SeverityOverride",
		reason: "the warning rule becomes info, the critical one is untouched",
		values: "prometheusRule: {alerts: {" + staleServed + "/warning: {severity: info}}}",
		want: func(t *testing.T, g []any) []any {
			requireAlert(t, g, staleServed, "warning")
			alerts(g, func(r map[string]any) {
				if r["alert"] == staleServed && severity(r) == "warning" {
					setIn(r, "labels", "severity", "info")
				}
			})
			return g
		},
	}, {
		name:   "ForAndKeepFiringFor",
		reason: "for and keep_firing_for are set on every rule of the name",
		values: "prometheusRule: {alerts: {" + absent + ": {for: 30m, keepFiringFor: 10m}, " + staleServed + "/critical: {for: 2m}}}",
		want: func(t *testing.T, g []any) []any {
			requireAlert(t, g, absent, "")
			alerts(g, func(r map[string]any) {
				if r["alert"] == absent {
					r["for"], r["keep_firing_for"] = "30m", "10m"
				}
				if r["alert"] == staleServed && severity(r) == "critical" {
					r["for"] = "2m"
				}
			})
			return g
		},
	}, {
		name:   "RunbookBase",
		reason: "each runbook_url becomes <base>#<its anchor>",
		values: "prometheusRule: {runbookBaseURL: 'https://wiki.example.com/ops/certdrift'}",
		want: func(t *testing.T, g []any) []any {
			n := 0
			alerts(g, func(r map[string]any) {
				a, _ := r["annotations"].(map[string]any)
				if u, ok := a["runbook_url"].(string); ok {
					_, anchor, found := strings.Cut(u, "#")
					if !found {
						t.Fatalf("%s: runbook_url %q has no anchor", r["alert"], u)
					}
					a["runbook_url"] = "https://wiki.example.com/ops/certdrift#" + anchor
					n++
				}
			})
			if n == 0 {
				t.Fatal("no alert in the rule file has a runbook_url")
			}
			return g
		},
	}, {
		name:   "RunbookKept",
		reason: `runbookBaseURL "" keeps the file's URLs`,
		values: "prometheusRule: {runbookBaseURL: ''}",
		want:   func(t *testing.T, g []any) []any { return g },
	}, {
		name:   "AlertLabelsAndAnnotations",
		reason: "added to every alert, not to recording rules; the alert's own severity and summary win",
		values: "prometheusRule: {alertLabels: {team: platform, severity: page}, alertAnnotations: {dashboard: 'https://grafana.example.com/d/x', summary: generic}}",
		want: func(t *testing.T, g []any) []any {
			alerts(g, func(r map[string]any) {
				labels, _ := r["labels"].(map[string]any)
				setIn(r, "labels", "team", "platform")
				if labels == nil || labels["severity"] == nil {
					setIn(r, "labels", "severity", "page")
				}
				ann, _ := r["annotations"].(map[string]any)
				setIn(r, "annotations", "dashboard", "https://grafana.example.com/d/x")
				if ann == nil || ann["summary"] == nil {
					setIn(r, "annotations", "summary", "generic")
				}
			})
			return g
		},
	}, {
		name:   "PerAlertLabels",
		reason: "an alert's own override labels and annotations win over alertLabels and the file",
		values: "prometheusRule: {alertLabels: {team: platform}, alerts: {" + absent + ": {labels: {team: sre}, annotations: {summary: certdrift is gone}}}}",
		want: func(t *testing.T, g []any) []any {
			requireAlert(t, g, absent, "")
			alerts(g, func(r map[string]any) {
				setIn(r, "labels", "team", "platform")
				if r["alert"] == absent {
					setIn(r, "labels", "team", "sre")
					setIn(r, "annotations", "summary", "certdrift is gone")
				}
			})
			return g
		},
	}, {
		name:   "ExtraGroups",
		reason: "extra groups are appended as written",
		values: `prometheusRule:
  extraGroups:
    - name: site.certdrift
      interval: 1m
      rules:
        - record: site:certdrift_findings:count
          expr: count(certdrift_finding)
        - alert: CertdriftSiteFindingsHigh
          expr: site:certdrift_findings:count > 100
          for: 30m
          labels: {severity: warning}
          annotations: {summary: Many findings.}
`,
		want: func(t *testing.T, g []any) []any {
			return append(g, map[string]any{"name": "site.certdrift", "interval": "1m", "rules": []any{
				map[string]any{"record": "site:certdrift_findings:count", "expr": "count(certdrift_finding)"},
				map[string]any{"alert": "CertdriftSiteFindingsHigh", "expr": "site:certdrift_findings:count > 100", "for": "30m",
					"labels": map[string]any{"severity": "warning"}, "annotations": map[string]any{"summary": "Many findings."}},
			}})
		},
	}}
	// A group whose alerts are all disabled goes; built from the file, whatever its last group holds.
	file := ruleFileGroups(t)
	var lastNames []string
	alerts([]any{lastGroup(file)}, func(r map[string]any) { lastNames = append(lastNames, r["alert"].(string)) })
	slices.Sort(lastNames)
	lastNames = slices.Compact(lastNames)
	var off strings.Builder
	off.WriteString("prometheusRule: {alerts: {")
	for i, n := range lastNames {
		if i > 0 {
			off.WriteString(", ")
		}
		off.WriteString(n + ": {disabled: true}")
	}
	off.WriteString("}}")
	cases = append(cases, struct {
		name   string
		reason string
		values string
		want   func(t *testing.T, groups []any) []any
	}{
		name:   "WholeGroupDisabled",
		reason: "a group left without rules is dropped, not emitted empty",
		values: off.String(),
		want: func(t *testing.T, g []any) []any {
			return g[:len(g)-1]
		},
	})

	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vf := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(vf, []byte(tc.values), 0o600); err != nil {
				t.Fatal(err)
			}
			_, got := renderedGroups(t, chartDir, "-f", vf)
			want := tc.want(t, ruleFileGroups(t))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
			promtoolCheck(t, dir, tc.name, got)
		})
	}
}

// TestHelmRulesPassThrough renders a copy of the chart whose rule file has fields the template
// never names (keep_firing_for, a group interval and limit, a recording rule, labels on a
// record): with overrides applied to the same alerts, each such field is still there. It does
// not depend on what alerts/certdrift.rules.yaml holds today.
func TestHelmRulesPassThrough(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certdrift")
	if out, err := exec.Command("cp", "-r", chartDir, dir).CombinedOutput(); err != nil {
		t.Fatalf("copy chart: %v\n%s", err, out)
	}
	rules := `groups:
  - name: synthetic
    interval: 2m
    limit: 10
    rules:
      - record: synthetic:up:sum
        expr: sum(up)
        labels: {tier: x}
      - alert: SyntheticAlert
        expr: vector(1)
        for: 5m
        keep_firing_for: 10m
        labels: {severity: critical}
        annotations: &a
          summary: 'it is {{ $labels.job }}'
          runbook_url: https://example.com/book.md#syntheticalert
      - alert: SyntheticAlert
        expr: vector(2)
        for: 5m
        keep_firing_for: 20m
        labels: {severity: warning}
        annotations: *a
`
	if err := os.WriteFile(filepath.Join(dir, "files", "certdrift.rules.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	vf := filepath.Join(t.TempDir(), "values.yaml")
	values := "prometheusRule: {runbookBaseURL: 'https://wiki.example.com/b', alertLabels: {team: t}, alerts: {SyntheticAlert/warning: {for: 1m}}}"
	if err := os.WriteFile(vf, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	_, got := renderedGroups(t, dir, "-f", vf)
	want := decodeGroups(t, []byte(rules))
	alerts(want, func(r map[string]any) {
		setIn(r, "labels", "team", "t")
		// The YAML alias is decoded into one map shared by both rules: replace, do not mutate.
		r["annotations"] = map[string]any{"summary": "it is {{ $labels.job }}", "runbook_url": "https://wiki.example.com/b#syntheticalert"}
		if severity(r) == "warning" {
			r["for"] = "1m"
		}
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields the template does not override must pass through (-want +got):\n%s", diff)
	}
	promtoolCheck(t, t.TempDir(), "synthetic", got)
}

// TestHelmRulesPromtoolCatches is the control for promtoolCheck: an extra group with a broken
// expression renders (Helm does not parse PromQL) and promtool refuses it.
func TestHelmRulesPromtoolCatches(t *testing.T) {
	_, groups := renderedGroups(t, chartDir, "--set-json",
		`prometheusRule.extraGroups=[{"name":"broken","rules":[{"alert":"Broken","expr":"sum(certdrift_finding"}]}]`)
	dir := t.TempDir()
	out, err := promtool(t, dir, groups)
	if err == nil || !strings.Contains(out, "Broken") && !strings.Contains(out, "parse error") {
		t.Fatalf("promtool accepted a rule with an unbalanced parenthesis (err %v):\n%s", err, out)
	}
}

func promtoolCheck(t *testing.T, dir, name string, groups []any) {
	t.Helper()
	if out, err := promtool(t, filepath.Join(dir, name), groups); err != nil {
		t.Errorf("promtool check rules on the rendered spec.groups: %v\n%s", err, out)
	}
}

// promtool writes groups as a rule file and runs `promtool check rules` on it.
func promtool(t *testing.T, dir string, groups []any) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found on PATH: install it with `apt-get install prometheus` (Debian's package ships promtool)")
	}
	b, err := json.Marshal(map[string]any{"groups": groups}) // JSON is YAML to promtool
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "check", "rules", p).CombinedOutput()
	return string(out), err
}

// TestHelmRuleObject: prometheusRule.labels and annotations go on the PrometheusRule object.
func TestHelmRuleObject(t *testing.T) {
	pr, _ := renderedGroups(t, chartDir, "--set", "prometheusRule.labels.release=kps", "--set", "prometheusRule.annotations.owner=platform")
	if pr.GetLabels()["release"] != "kps" || pr.GetLabels()["app.kubernetes.io/name"] != "certdrift" {
		t.Errorf("PrometheusRule labels %v: want release=kps beside the chart's labels", pr.GetLabels())
	}
	if pr.GetAnnotations()["owner"] != "platform" {
		t.Errorf("PrometheusRule annotations %v: want owner=platform", pr.GetAnnotations())
	}
}

// goMemLimit renders the chart and returns the certdrift container's GOMEMLIMIT, if any.
func goMemLimit(t *testing.T, valueArgs ...string) (string, bool) {
	t.Helper()
	_, objs := helmTemplateArgs(t, valueArgs)
	d := find(objs, "Deployment", releaseNS, release)
	if d == nil {
		t.Fatal("no Deployment")
	}
	var v string
	n := 0
	for _, e := range convert[appsv1.Deployment](t, d).Spec.Template.Spec.Containers[0].Env {
		if e.Name == "GOMEMLIMIT" {
			v, n = e.Value, n+1
		}
	}
	if n > 1 {
		t.Fatalf("GOMEMLIMIT set %d times", n)
	}
	return v, n == 1
}

// runtimeMemoryLimit starts this test binary with GOMEMLIMIT=value and returns the memory limit
// the Go runtime took from it, or the child's failure (the runtime refuses a malformed value at
// start).
func runtimeMemoryLimit(t *testing.T, value string) (int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), memLimitChildEnv+"=1", "GOMEMLIMIT="+value)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	return strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
}

// TestHelmGoMemLimit: GOMEMLIMIT is goMemLimitRatio of the memory limit, computed by the chart
// from the quantity as Kubernetes reads it (resource.Quantity here), and the Go runtime reads the
// value back as that many bytes.
func TestHelmGoMemLimit(t *testing.T) {
	cases := []struct {
		name, limit string
		ratio       float64
		args        []string
	}{
		{name: "Default", limit: "256Mi", ratio: 0.9},
		{name: "Gi", limit: "1Gi", ratio: 0.85, args: []string{"--set", "resources.limits.memory=1Gi", "--set-json", "goMemLimitRatio=0.85"}},
		{name: "FractionalGi", limit: "1.5Gi", ratio: 0.9, args: []string{"--set", "resources.limits.memory=1.5Gi"}},
		{name: "Decimal", limit: "300M", ratio: 0.9, args: []string{"--set", "resources.limits.memory=300M"}},
		{name: "Ki", limit: "524288Ki", ratio: 0.75, args: []string{"--set", "resources.limits.memory=524288Ki", "--set-json", "goMemLimitRatio=0.75"}},
		{name: "Exponent", limit: "129e6", ratio: 0.9, args: []string{"--set-string", "resources.limits.memory=129e6"}},
		{name: "PlainNumber", limit: "268435456", ratio: 0.9, args: []string{"--set-json", "resources.limits.memory=268435456"}},
		{name: "WholeLimit", limit: "256Mi", ratio: 1, args: []string{"--set-json", "goMemLimitRatio=1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := goMemLimit(t, tc.args...)
			if !ok {
				t.Fatal("no GOMEMLIMIT in the container's env")
			}
			q := resource.MustParse(tc.limit)
			want := int64(math.Floor(float64(q.Value()) * tc.ratio))
			if got != strconv.FormatInt(want, 10) {
				t.Errorf("GOMEMLIMIT %q, want %d (%v of %s)", got, want, tc.ratio, tc.limit)
			}
			lim, err := runtimeMemoryLimit(t, got)
			if err != nil {
				t.Fatalf("the Go runtime did not take GOMEMLIMIT=%s: %v", got, err)
			}
			if lim != want {
				t.Errorf("Go runtime memory limit %d with GOMEMLIMIT=%s, want %d", lim, got, want)
			}
			if want >= q.Value() && tc.ratio < 1 {
				t.Errorf("GOMEMLIMIT %d leaves no room below the limit %d", want, q.Value())
			}
		})
	}

	// Not set: ratio 0, no memory limit, or the user's own GOMEMLIMIT (which is kept as given).
	for name, args := range map[string][]string{
		"RatioZero": {"--set-json", "goMemLimitRatio=0"},
		"NoLimit":   {"--set", "resources.limits=null"},
	} {
		t.Run(name, func(t *testing.T) {
			if v, ok := goMemLimit(t, args...); ok {
				t.Errorf("GOMEMLIMIT %q set", v)
			}
		})
	}
	t.Run("UserValue", func(t *testing.T) {
		if v, _ := goMemLimit(t, "--set", "env.GOMEMLIMIT=200MiB"); v != "200MiB" {
			t.Errorf("GOMEMLIMIT %q, want the user's 200MiB only", v)
		}
	})

	// The controls: the runtime check is real. A Kubernetes-style suffix (Mi, not MiB) or a
	// fraction is refused by the Go runtime, which is why the chart emits a plain byte count.
	for _, bad := range []string{"256Mi", "241591910.5"} {
		if lim, err := runtimeMemoryLimit(t, bad); err == nil {
			t.Errorf("GOMEMLIMIT=%s: the Go runtime accepted it (limit %d); the check above proves nothing", bad, lim)
		}
	}
}

// TestHelmRuntimeValues checks the runtime, placement and scrape values, each against a render.
func TestHelmRuntimeValues(t *testing.T) {
	deployment := func(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
		t.Helper()
		d := find(objs, "Deployment", releaseNS, release)
		if d == nil {
			t.Fatal("no Deployment")
		}
		return convert[appsv1.Deployment](t, d)
	}
	defaults := func(t *testing.T) *appsv1.Deployment {
		_, objs := helmTemplateArgs(t, nil)
		return deployment(t, objs)
	}
	tuned := helmCase{name: "runtime-tuned", values: []string{"runtime-tuned.yaml"}}

	t.Run("Resources", func(t *testing.T) {
		r := defaults(t).Spec.Template.Spec.Containers[0].Resources
		req, lim := r.Requests[corev1.ResourceMemory], r.Limits[corev1.ResourceMemory]
		// docs/benchmarks.md: ≈ 119 MB resident serving 10,000 Secrets; the bound ≈ 241 MiB.
		if req.Value() < 119e6 || lim.Value() < 241<<20 || req.Cmp(lim) > 0 {
			t.Errorf("memory request %s, limit %s: want the request at the measured working set (≥ 119 MB) and the limit at the documented bound (≥ 241 MiB)", &req, &lim)
		}
	})

	t.Run("SecurityContextMerge", func(t *testing.T) {
		def := defaults(t).Spec.Template.Spec
		_, objs := helmTemplateArgs(t, tuned.args())
		got := deployment(t, objs).Spec.Template.Spec
		// What runtime-tuned.yaml sets replaces the default; the rest of the defaults stay.
		wantPod := def.SecurityContext.DeepCopy()
		u := int64(10001)
		wantPod.RunAsUser, wantPod.RunAsGroup, wantPod.FSGroup = &u, &u, &u
		if diff := cmp.Diff(wantPod, got.SecurityContext); diff != "" {
			t.Errorf("pod securityContext (-want +got):\n%s", diff)
		}
		wantCtr := def.Containers[0].SecurityContext.DeepCopy()
		wantCtr.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
		if diff := cmp.Diff(wantCtr, got.Containers[0].SecurityContext); diff != "" {
			t.Errorf("container securityContext (-want +got):\n%s", diff)
		}
		// false replaces true: the override is key by key, not a deep merge that skips zeros.
		_, objs = helmTemplateArgs(t, []string{"--set", "containerSecurityContext.readOnlyRootFilesystem=false"})
		if sc := deployment(t, objs).Spec.Template.Spec.Containers[0].SecurityContext; sc.ReadOnlyRootFilesystem == nil || *sc.ReadOnlyRootFilesystem {
			t.Errorf("readOnlyRootFilesystem=false was not applied: %+v", sc)
		}
	})

	t.Run("Env", func(t *testing.T) {
		_, objs := helmTemplateArgs(t, tuned.args())
		env := deployment(t, objs).Spec.Template.Spec.Containers[0].Env
		var names []string
		for _, e := range env {
			names = append(names, e.Name)
		}
		if diff := cmp.Diff([]string{"POD_NAMESPACE", "POD_NAME", "GOMEMLIMIT", "GOGC", "CERTDRIFT_NODE_NAME"}, names); diff != "" {
			t.Errorf("env names (-want +got):\n%s", diff)
		}
		for _, e := range env {
			switch e.Name {
			case "GOGC":
				if e.Value != "150" {
					t.Errorf("GOGC %q", e.Value)
				}
			case "CERTDRIFT_NODE_NAME":
				if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
					t.Errorf("extraEnv entry not kept as written: %+v", e)
				}
			}
		}
	})

	t.Run("TopologySpread", func(t *testing.T) {
		_, objs := helmTemplateArgs(t, append(tuned.args(), "--set-json",
			`topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"ScheduleAnyway"},`+
				`{"maxSkew":2,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"DoNotSchedule","labelSelector":{"matchLabels":{"app":"mine"}}}]`))
		d := deployment(t, objs)
		tsc := d.Spec.Template.Spec.TopologySpreadConstraints
		if len(tsc) != 2 {
			t.Fatalf("%d constraints, want 2", len(tsc))
		}
		if tsc[0].LabelSelector == nil || !cmp.Equal(tsc[0].LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
			t.Errorf("a constraint without labelSelector should select the release's pods %v, got %+v", d.Spec.Selector.MatchLabels, tsc[0].LabelSelector)
		}
		if tsc[1].LabelSelector == nil || tsc[1].LabelSelector.MatchLabels["app"] != "mine" || len(tsc[1].LabelSelector.MatchLabels) != 1 {
			t.Errorf("a constraint's own labelSelector must be kept, got %+v", tsc[1].LabelSelector)
		}
	})

	t.Run("PodDisruptionBudget", func(t *testing.T) {
		for _, c := range []struct {
			args              []string
			minAvail, maxUnav string
		}{
			{args: []string{"--set", "podDisruptionBudget.enabled=true"}, maxUnav: "1"},
			{args: []string{"--set", "podDisruptionBudget.enabled=true", "--set", "podDisruptionBudget.minAvailable=1"}, minAvail: "1"},
			{args: []string{"--set", "podDisruptionBudget.enabled=true", "--set", "podDisruptionBudget.maxUnavailable=0"}, maxUnav: "0"},
			{args: []string{"--set", "podDisruptionBudget.enabled=true", "--set", "podDisruptionBudget.maxUnavailable=50%"}, maxUnav: "50%"},
		} {
			_, objs := helmTemplateArgs(t, c.args)
			o := find(objs, "PodDisruptionBudget", releaseNS, release)
			if o == nil {
				t.Fatalf("%v: no PodDisruptionBudget", c.args)
			}
			pdb := convert[policyv1.PodDisruptionBudget](t, o)
			str := func(v any) string {
				if v == nil {
					return ""
				}
				return fmt.Sprint(v)
			}
			var gotMin, gotMax any
			if pdb.Spec.MinAvailable != nil {
				gotMin = pdb.Spec.MinAvailable.String()
			}
			if pdb.Spec.MaxUnavailable != nil {
				gotMax = pdb.Spec.MaxUnavailable.String()
			}
			if str(gotMin) != c.minAvail || str(gotMax) != c.maxUnav {
				t.Errorf("%v: minAvailable %v maxUnavailable %v, want %q %q", c.args, gotMin, gotMax, c.minAvail, c.maxUnav)
			}
			if !cmp.Equal(pdb.Spec.Selector.MatchLabels, deployment(t, objs).Spec.Selector.MatchLabels) {
				t.Errorf("PDB selector %v is not the Deployment's", pdb.Spec.Selector.MatchLabels)
			}
		}
		_, objs := helmTemplateArgs(t, nil)
		if find(objs, "PodDisruptionBudget", releaseNS, release) != nil {
			t.Error("a PodDisruptionBudget by default")
		}
	})

	t.Run("NetworkPolicy", func(t *testing.T) {
		testPeer := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
			"app.kubernetes.io/name": "certdrift", "app.kubernetes.io/instance": release, "app.kubernetes.io/component": "test"}}}
		nsPeer := func(ns string) networkingv1.NetworkPolicyPeer {
			return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
		}
		custom := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "prometheus"}}}
		for _, c := range []struct {
			name string
			args []string
			want []networkingv1.NetworkPolicyPeer
		}{
			{"Default", nil, []networkingv1.NetworkPolicyPeer{nsPeer("monitoring"), testPeer}},
			{"PrometheusNamespace", tuned.args(), []networkingv1.NetworkPolicyPeer{nsPeer("observability"), testPeer}},
			{"CustomFrom", []string{"--set-json", `networkPolicy.from=[{"podSelector":{"matchLabels":{"app":"prometheus"}}}]`}, []networkingv1.NetworkPolicyPeer{custom, testPeer}},
			{"NoTests", []string{"--set", "tests.enabled=false"}, []networkingv1.NetworkPolicyPeer{nsPeer("monitoring")}},
		} {
			_, objs := helmTemplateArgs(t, c.args)
			o := find(objs, "NetworkPolicy", releaseNS, release)
			if o == nil {
				t.Fatalf("%s: no NetworkPolicy", c.name)
			}
			np := convert[networkingv1.NetworkPolicy](t, o)
			if len(np.Spec.Ingress) != 1 {
				t.Fatalf("%s: %d ingress rules, want 1", c.name, len(np.Spec.Ingress))
			}
			if diff := cmp.Diff(c.want, np.Spec.Ingress[0].From); diff != "" {
				t.Errorf("%s: ingress from (-want +got):\n%s", c.name, diff)
			}
		}
	})

	t.Run("TestPod", func(t *testing.T) {
		_, objs := helmTemplateArgs(t, nil)
		o := find(objs, "Pod", releaseNS, "certdrift-healthcheck")
		if o == nil {
			t.Fatal("no helm test Pod")
		}
		if o.GetAnnotations()["helm.sh/hook"] != "test" {
			t.Errorf("test Pod annotations %v: want helm.sh/hook: test", o.GetAnnotations())
		}
		pod := convert[corev1.Pod](t, o)
		if diff := cmp.Diff([]string{"healthcheck", "--timeout=10s", "certdrift.certdrift.svc:9809"}, pod.Spec.Containers[0].Args); diff != "" {
			t.Errorf("test Pod args (-want +got):\n%s", diff)
		}
		if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
			t.Errorf("test Pod: restartPolicy %q, automountServiceAccountToken %v: want Never and false", pod.Spec.RestartPolicy, pod.Spec.AutomountServiceAccountToken)
		}
		// The exporter's selectors must not pick up the test pod.
		d := deployment(t, objs)
		svc := convert[corev1.Service](t, find(objs, "Service", releaseNS, release))
		for what, sel := range map[string]map[string]string{"Deployment": d.Spec.Selector.MatchLabels, "Service": svc.Spec.Selector} {
			match := true
			for k, v := range sel {
				match = match && pod.Labels[k] == v
			}
			if match {
				t.Errorf("the %s selector %v matches the test Pod's labels %v", what, sel, pod.Labels)
			}
		}
		_, objs = helmTemplateArgs(t, tuned.args())
		if p := convert[corev1.Pod](t, find(objs, "Pod", releaseNS, "certdrift-healthcheck")); p.Spec.Containers[0].Args[2] != "certdrift.certdrift.svc.cluster.local:9809" {
			t.Errorf("tests.address not used: %v", p.Spec.Containers[0].Args)
		}
	})

	t.Run("MonitorAuth", func(t *testing.T) {
		_, objs := helmTemplateArgs(t, []string{"-f", filepath.Join("testdata", "values", "podmonitor-auth.yaml")})
		pm := find(objs, "PodMonitor", releaseNS, release)
		if pm == nil {
			t.Fatal("no PodMonitor")
		}
		eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
		want := map[string]any{
			"username": map[string]any{"name": "certdrift-scrape", "key": "username"},
			"password": map[string]any{"name": "certdrift-scrape", "key": "password"},
		}
		if len(eps) != 1 || !cmp.Equal(want, eps[0].(map[string]any)["basicAuth"]) {
			t.Errorf("PodMonitor endpoints %v: want basicAuth %v", eps, want)
		}
		_, objs = helmTemplateArgs(t, []string{"--set", "serviceMonitor.enabled=true",
			"--set", "serviceMonitor.authorization.credentials.name=tok", "--set", "serviceMonitor.authorization.credentials.key=token"})
		eps, _, _ = unstructured.NestedSlice(find(objs, "ServiceMonitor", releaseNS, release).Object, "spec", "endpoints")
		wantAuthz := map[string]any{"credentials": map[string]any{"name": "tok", "key": "token"}}
		if len(eps) != 1 || !cmp.Equal(wantAuthz, eps[0].(map[string]any)["authorization"]) {
			t.Errorf("ServiceMonitor endpoints %v: want authorization %v", eps, wantAuthz)
		}
	})
}
