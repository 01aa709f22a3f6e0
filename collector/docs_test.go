package collector

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// docRow is one metric as docs/metrics.md lists it.
type docRow struct {
	Type   string
	Labels []string
}

// TestMetricsDocumented walks a registry with every metric populated and compares it with the
// tables of docs/metrics.md: an exposed metric missing from the page, a row for a metric that no
// longer exists, or a wrong type or label set fails.
func TestMetricsDocumented(t *testing.T) {
	documented := readMetricsDoc(t, "../docs/metrics.md")

	s := NewStore(Options{Now: clock(t0.Add(time.Minute)), Build: BuildInfo{"v", "r", "go"}})
	rotation(s)
	s.Record(kubeRound(t0.Add(40*time.Second), true))
	rotation(s) // back to the local world: drift series come from it
	s.KubernetesRequest("<error>")
	s.ConfigReloaded(true, t0)
	mfs := gatherStore(t, s)
	// cert-manager's series come from a Kubernetes round of their own (certmanager_test.go).
	cm := NewStore(Options{Now: clock(t0.Add(time.Minute))})
	cm.Record(certManagerRound(t0))
	for _, mf := range gatherStore(t, cm) {
		if strings.HasPrefix(mf.GetName(), "certdrift_certmanager_") {
			mfs = append(mfs, mf)
		}
	}
	// The repair metrics are a collector of their own (serve --remediate registers it).
	repair := NewRepairMetrics([]string{"evict"}, []string{"done"})
	repair.ReloadAction("evict", "done", true, t0)
	repair.SetBlocked([]BlockedWorkload{{Namespace: "shop", Workload: "Deployment/web", Reason: "x"}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(repair)
	repairMFs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]*metricFamily{}
	for _, f := range allFamilies {
		declared[f.name] = f
	}
	exposed := map[string]docRow{}
	for _, mf := range mfs {
		f := declared[mf.GetName()]
		if f == nil {
			t.Errorf("%s is exposed but not declared", mf.GetName())
			continue
		}
		// A family's series carry the labels of their view: each within the declared set.
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "le" && !slices.Contains(f.labels, l.GetName()) {
					t.Errorf("%s has a series labelled %s, which its declaration does not list (%v)", f.name, l.GetName(), f.labels)
				}
			}
		}
		exposed[f.name] = docRow{Type: typeName(mf.GetType()), Labels: f.labels}
	}
	for _, mf := range repairMFs {
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		exposed[mf.GetName()] = docRow{Type: typeName(mf.GetType()), Labels: labels}
	}
	// Every family must show up populated, or the walk above proves nothing for it.
	for _, f := range allFamilies {
		if _, ok := exposed[f.name]; !ok {
			t.Errorf("%s is declared but the test's store does not populate it: extend the fixture", f.name)
		}
	}
	ch := make(chan *prometheus.Desc, 64)
	repair.Describe(ch)
	close(ch)
	for d := range ch {
		m := fqNameRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		if _, ok := exposed[m[1]]; !ok {
			t.Errorf("%s is declared but the test's registry does not populate it: extend the fixture", m[1])
		}
	}
	if diff := cmp.Diff(documented, exposed); diff != "" {
		t.Errorf("docs/metrics.md and the exposed metrics differ (-documented +exposed):\n%s", diff)
	}
}

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

func typeName(t dto.MetricType) string {
	return strings.ToLower(t.String())
}

// readMetricsDoc reads the rows "| `name` | type | labels | meaning |" of the page's tables.
func readMetricsDoc(t *testing.T, path string) map[string]docRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open the metrics documentation: %v", err)
	}
	defer f.Close()
	rows := map[string]docRow{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| `certdrift_") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Errorf("%s: malformed row %q", path, line)
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var labels []string
		for _, l := range strings.Split(cells[3], ",") {
			if l = strings.TrimSpace(l); l != "" && l != "—" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		if _, dup := rows[name]; dup {
			t.Errorf("%s: %s listed twice", path, name)
		}
		rows[name] = docRow{Type: strings.TrimSpace(cells[2]), Labels: labels}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}
