package main

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/certdrift/certdrift/test/readmeblock"
	"github.com/certdrift/certdrift/test/standalone"
)

var update = flag.Bool("update", false, "rewrite README.md's demo output block with this run's second audit")

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
	// The README shows the second audit only: the first is the clean baseline the checks above
	// hold, and the README has a line budget (issue 19).
	readme.Check(t, "== After the rotation"+after, *update)
}

// readme is the README's demo block. After a change of certdrift's output,
// `go test ./test/demo -run TestDemo -update` rewrites it.
var readme = readmeblock.Block{
	Path:    "../../README.md",
	Name:    "demo output",
	Update:  "go test ./test/demo -run TestDemo -update",
	Rules:   []readmeblock.Rule{{Re: regexp.MustCompile(`\S*/certdrift-demo-[0-9]+`), With: "<dir>"}},
	Control: [2]string{"CONVERGED", "STALE"},
}
