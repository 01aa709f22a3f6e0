package deploy

// docs/operate.md's RBAC table is checked against the chart: each value set named in its first
// column is rendered, its Roles and ClusterRoles (beyond what its base profile grants) are
// flattened to (scope, API group, resource, verbs) rows, and the table must list exactly those.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	rbacTableBegin = "<!-- BEGIN RBAC table: deploy/rbacdoc_test.go checks it against the chart -->"
	rbacTableEnd   = "<!-- END RBAC table -->"
)

// docValueSets are the table's value sets: the values rendered, the value set whose grants are
// left out (the table lists what each adds), and what each namespace the render names is
// called in the table.
var docValueSets = map[string]struct {
	set    []string
	base   string
	scopes map[string]string
}{
	"cluster-readonly": {scopes: map[string]string{}},
	"namespaced": {set: []string{"rbac.profile=namespaced", "rbac.namespaces={shop,edge}"},
		scopes: map[string]string{"shop": "each of `rbac.namespaces`", "edge": "each of `rbac.namespaces`"}},
	"rbac.portForward": {set: []string{"rbac.portForward.enabled=true", "rbac.portForward.namespaces={edge}"}, base: "cluster-readonly",
		scopes: map[string]string{"edge": "each of `rbac.portForward.namespaces`"}},
	"repair.enabled": {set: []string{"repair.enabled=true"}, base: "cluster-readonly",
		scopes: map[string]string{releaseNS: "release namespace"}},
	"repair.namespaces": {set: []string{"repair.enabled=true", "repair.namespaces={shop}"}, base: "repair.enabled",
		scopes: map[string]string{"shop": "each of `repair.namespaces`", releaseNS: "release namespace"}},
}

// grantRows flattens a render's rules to "scope | group | resource | verbs" rows.
func grantRows(t *testing.T, objs []*unstructured.Unstructured, scopes map[string]string) []string {
	t.Helper()
	var rows []string
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		scope := "cluster-wide"
		if o.GetKind() == "Role" {
			var ok bool
			if scope, ok = scopes[o.GetNamespace()]; !ok {
				t.Fatalf("Role %s/%s: no table name for namespace %s", o.GetNamespace(), o.GetName(), o.GetNamespace())
			}
		}
		for _, r := range convert[rbacv1.ClusterRole](t, o).Rules {
			verbs := slices.Sorted(slices.Values(r.Verbs))
			for _, g := range r.APIGroups {
				if g == "" {
					g = "core"
				}
				for _, res := range r.Resources {
					rows = append(rows, fmt.Sprintf("%s | %s | %s | %s", scope, g, res, strings.Join(verbs, ", ")))
				}
			}
		}
	}
	slices.Sort(rows)
	return slices.Compact(rows)
}

// docRows reads the table: "| `value set` | scope | group | resources | verbs |", several
// groups or resources per cell allowed (comma-separated), each cell's backquotes optional.
func docRows(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "operate.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, rbacTableBegin), strings.Index(doc, rbacTableEnd)
	if i < 0 || j < i {
		t.Fatalf("docs/operate.md has no %q ... %q section", rbacTableBegin, rbacTableEnd)
	}
	out := map[string][]string{}
	split := func(cell string) []string {
		var xs []string
		for _, x := range strings.Split(cell, ",") {
			xs = append(xs, strings.Trim(strings.TrimSpace(x), "`"))
		}
		return xs
	}
	for _, line := range strings.Split(doc[i:j], "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue
		}
		set := strings.Trim(strings.TrimSpace(cells[0]), "`")
		scope := strings.TrimSpace(cells[1])
		verbs := split(cells[4])
		slices.Sort(verbs)
		for _, g := range split(cells[2]) {
			for _, res := range split(cells[3]) {
				out[set] = append(out[set], fmt.Sprintf("%s | %s | %s | %s", scope, g, res, strings.Join(verbs, ", ")))
			}
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

func TestOperateRBACTable(t *testing.T) {
	doc := docRows(t)
	rendered := map[string][]string{}
	for name, vs := range docValueSets {
		_, objs := helmTemplate(t, vs.set)
		rendered[name] = grantRows(t, objs, vs.scopes)
	}
	for name, vs := range docValueSets {
		t.Run(name, func(t *testing.T) {
			want := rendered[name]
			if vs.base != "" {
				want = slices.DeleteFunc(slices.Clone(want), func(r string) bool { return slices.Contains(rendered[vs.base], r) })
			}
			if len(want) == 0 {
				t.Fatalf("value set %s adds no grant: the test's value sets are wrong", name)
			}
			if diff := cmp.Diff(want, doc[name]); diff != "" {
				t.Errorf("docs/operate.md's RBAC rows for `%s` differ from the chart (-chart +doc):\n%s", name, diff)
			}
		})
	}
	for name := range doc {
		if _, ok := docValueSets[name]; !ok {
			t.Errorf("docs/operate.md's RBAC table names value set `%s`, which the test does not render", name)
		}
	}
}
