package remediate

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/audit"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/render")

// reloadResults is one of each outcome the table shows, with the long details the executor
// writes (a post-check, a PDB refusal) and a hostile pod name.
func reloadResults() []Result {
	wl := Workload{Namespace: "static-tls", Kind: "Deployment", Name: "envoy"}
	return []Result{
		{Action: Action{Strategy: Evict, Target: Target{Envoy: "static-tls/envoy-5699ff9cf6-qkbk8", Namespace: "static-tls", Pod: "envoy-5699ff9cf6-qkbk8", Workload: wl}},
			Outcome: OutcomeDone, Detail: "static-tls/envoy-5699ff9cf6-zz9k2 loads and serves the desired certificate of static-tls/web-tls (sha256:0e292592411430f0)",
			Replacements: []string{"static-tls/envoy-5699ff9cf6-zz9k2"}},
		{Action: Action{Strategy: Evict, Target: Target{Envoy: "static-tls/envoy-5699ff9cf6-x2v7p", Namespace: "static-tls", Pod: "envoy-5699ff9cf6-x2v7p", Workload: wl}},
			Outcome: OutcomeRefused, Detail: "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget envoy-pdb needs 2 healthy pods and has 2 currently; nothing forced"},
		{Action: Action{Strategy: RolloutRestart, Target: Target{Namespace: "gw", Workload: Workload{Namespace: "gw", Kind: "Deployment", Name: "ratelimit"}}, Skip: SkipBudget, Why: "the run's budget of 1 action is spent"},
			Outcome: OutcomeSkipped, Detail: "the run's budget of 1 action is spent"},
		{Action: Action{Strategy: AdminQuit, Target: Target{Envoy: "edge\x1b[31m-static"}},
			Outcome: OutcomeFailed, Reason: "post_check_failed", Detail: "edge-static still serves sha256:8372ca16a16ca972\nafter 30s"},
	}
}

func TestRenderTableGolden(t *testing.T) {
	tests := map[string]struct {
		reason  string
		dryRun  bool
		results []Result
		golden  string
	}{
		"Results":   {reason: "each outcome with its detail wrapped under its row", results: reloadResults(), golden: "reload.golden"},
		"DryRunNil": {reason: "a dry run with nothing to do says so", dryRun: true, golden: "reload_empty.golden"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := RenderTable(&b, tc.dryRun, tc.results); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "render", tc.golden)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden %s (go test ./remediate -run TestRenderTableGolden -update creates it): %v", path, err)
			}
			if diff := cmp.Diff(string(want), b.String()); diff != "" {
				t.Errorf("%s\n%s: -golden +got:\n%s", tc.reason, path, diff)
			}
			for _, l := range strings.Split(b.String(), "\n") {
				if utf8.RuneCountInString(l) > audit.TableWidth {
					t.Errorf("%s: line of %d columns: %q", tc.reason, utf8.RuneCountInString(l), l)
				}
				if strings.ContainsAny(l, "\x1b\r") {
					t.Errorf("%s: control character from a name reached the terminal: %q", tc.reason, l)
				}
			}
		})
	}
}
