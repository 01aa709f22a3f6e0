package main

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/test/standalone"
)

var update = flag.Bool("update", false, "rewrite README.md's demo output block with this run's output")

// TestDemo runs the quickstart as the README shows it and checks the story it tells: clean before
// the rotation; after it, the SDS Envoy converged and the static one stale in both views.
func TestDemo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "certdrift")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/certdrift/certdrift/cmd/certdrift").CombinedOutput(); err != nil {
		t.Fatalf("build certdrift: %v\n%s", err, out)
	}
	r := standalone.New("demo")
	var out strings.Builder
	code := r.Run(func() { run(r, &out, bin) }, 2)
	if _, err := os.Stat(r.Dir()); !os.IsNotExist(err) {
		t.Errorf("demo left %s behind", r.Dir())
	}
	text := out.String()
	if code != 0 {
		t.Fatalf("demo failed:\n%s", text)
	}
	before, after, ok := strings.Cut(text, "== After the rotation")
	if !ok {
		t.Fatalf("no second audit in the output:\n%s", text)
	}
	for _, want := range []string{"clean: 0 findings across 2 envoys; judged 2 of 2 bindings, 2 of 2 handshakes", "(exit code 0)"} {
		if !strings.Contains(before, want) {
			t.Errorf("before the rotation: want %q in:\n%s", want, before)
		}
	}
	for _, re := range []string{
		`envoy edge-static\n\s+WARNING\s+STALE_LOADED`, `WARNING\s+STALE_SERVED`,
		`edge-sds\s+web\s+CONVERGED`, `edge-static\s+web\s+STALE`,
		`2 findings \(2 warning\)`, `\(exit code 1\)`,
	} {
		if !regexp.MustCompile(re).MatchString(after) {
			t.Errorf("after the rotation: want /%s/ in:\n%s", re, after)
		}
	}
	if strings.Contains(text, "PRIVATE KEY") {
		t.Errorf("demo output contains private key material")
	}
	checkREADME(t, "== Before the rotation"+strings.SplitN(text, "== Before the rotation", 2)[1])
}

// The README shows the demo's output from the first audit on, between these markers. After a
// change of certdrift's output, `go test ./test/demo -run TestDemo -update` rewrites it.
const (
	readmePath  = "../../README.md"
	outputBegin = "<!-- BEGIN demo output: TestDemo checks it; go test ./test/demo -run TestDemo -update rewrites it -->\n```text\n"
	outputEnd   = "```\n<!-- END demo output -->"
)

// checkREADME compares README.md's demo output block with this run's output, up to what changes
// from run to run (normalize), or rewrites the block with -update.
func checkREADME(t *testing.T, got string) {
	t.Helper()
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i, j := strings.Index(readme, outputBegin), strings.Index(readme, outputEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no demo output block (%q ... %q)", outputBegin, outputEnd)
	}
	shown := readme[i+len(outputBegin) : j]
	lines := strings.Split(strings.TrimRight(got, " \n"), "\n")
	for k := range lines {
		lines[k] = strings.TrimRight(lines[k], " ")
	}
	got = strings.Join(lines, "\n") + "\n"
	if *update {
		if err := os.WriteFile(readmePath, []byte(readme[:i+len(outputBegin)]+got+readme[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the demo output in README.md")
		return
	}
	if diff := cmp.Diff(normalize(shown), normalize(got)); diff != "" {
		t.Errorf("README.md's demo output is not what the demo prints (-README +demo, after normalize):\n%s\n"+
			"If the change is intended: go test ./test/demo -run TestDemo -update, and review the diff.", diff)
	}
	// The comparison must notice a changed verdict: the control.
	if cmp.Equal(normalize(got), normalize(strings.Replace(got, "CONVERGED", "STALE", 1))) {
		t.Errorf("normalize hides a changed binding state")
	}
}

// Parts of the demo's output that differ between runs of the same story: the temporary
// directory, serials and fingerprints, ports, durations, and column widths that follow them.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\S*/certdrift-demo-[0-9]+`), "<dir>"},
	{regexp.MustCompile(`\b[0-9a-f]{8,}\b`), "<hex>"},
	{regexp.MustCompile(`127\.0\.0\.1:[0-9]+`), "127.0.0.1:<port>"},
	{regexp.MustCompile(`\b([0-9]+(\.[0-9]+)?(ns|µs|ms|s|m|h))+\b`), "<duration>"},
}

func normalize(s string) []string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		for _, v := range volatile {
			l = v.re.ReplaceAllString(l, v.with)
		}
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
