package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// wiringBudget is cmd/certdrift's size limit (DESIGN.md's layout, docs/architecture.md): the
// package holds flags, wiring, signals and exit codes, and those fit in fewer lines of Go than
// this. Logic that grows it belongs in the package that owns it.
const wiringBudget = 1000

// whereLogicBelongs is what the budget's failure tells the person who crossed it.
const whereLogicBelongs = `cmd/certdrift holds flags, wiring, signals and exit codes only (docs/architecture.md).
Move what is not into the package that owns it:
  observing (Secrets, files, Envoy admins, handshakes)  probe/…, one round of them: gather
  judging, findings, report and preflight rendering      audit
  the configuration file, its checks and verdict         config
  certdrift serve's loop, ports, its options' rules      exporter
  certdrift audit/preflight runs, audit --reload         oneshot
  repair, its policy and guards, results rendering       remediate
  reaching the cluster (kubeconfig, clients)             kubeapi, gather
Long help text goes in help/*.txt (embedded), not in Go strings.`

// goLines counts the lines of the non-test Go files directly in dir, as wc -l does, by file.
func goLines(dir string) (int, map[string]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil, err
	}
	total, byFile := 0, map[string]int{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0, nil, err
		}
		n := strings.Count(string(b), "\n")
		if len(b) > 0 && b[len(b)-1] != '\n' {
			n++ // a last line without its newline is still a line
		}
		byFile[name] = n
		total += n
	}
	return total, byFile, nil
}

// TestWiringBudget fails when cmd/certdrift's Go code, without tests, reaches wiringBudget lines,
// and says which files are largest and where their logic belongs.
func TestWiringBudget(t *testing.T) {
	// Control: the counter counts Go files line by line and leaves out tests, text and
	// subdirectories, so that the budget below measures what it claims to.
	dir := t.TempDir()
	for name, body := range map[string]string{
		"a.go": "package a\n\nfunc A() {}\n", "b.go": "package a\nvar B = 1", "a_test.go": "package a\n\n\n\n",
		"help.txt": "text\ntext\n", filepath.Join("sub", "c.go"): "package c\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n, byFile, err := goLines(dir); err != nil || n != 5 || len(byFile) != 2 {
		t.Fatalf("goLines of a.go (3 lines) and b.go (2, no final newline) = %d %v %v, want 5 from two files", n, byFile, err)
	}

	n, byFile, err := goLines(".")
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 || byFile["main.go"] == 0 {
		t.Fatalf("counted %d lines in %d files, without main.go: the counter does not read this package", n, len(byFile))
	}
	t.Logf("cmd/certdrift: %d lines of Go without tests (budget: under %d)", n, wiringBudget)
	if n < wiringBudget {
		return
	}
	names := make([]string, 0, len(byFile))
	for name := range byFile {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return byFile[names[i]] > byFile[names[j]] })
	var largest []string
	for _, name := range names[:min(5, len(names))] {
		largest = append(largest, fmt.Sprintf("%s %d", name, byFile[name]))
	}
	t.Errorf("cmd/certdrift has %d lines of Go without tests, the budget is under %d (largest: %s).\n%s",
		n, wiringBudget, strings.Join(largest, ", "), whereLogicBelongs)
}
