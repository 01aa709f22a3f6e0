package readmeblock

import (
	"regexp"
	"strings"
	"testing"
)

// TestCompare: the block matches a run that differs only in volatile parts, and not one whose
// verdict, wording or length differs; markers that are missing or out of order are an error.
func TestCompare(t *testing.T) {
	b := Block{
		Path:    "README.md",
		Name:    "x audit",
		Update:  "go test -update",
		Rules:   []Rule{{Re: regexp.MustCompile(`\b10\.\d+\.\d+\.\d+\b`), With: "<ip>"}},
		Control: [2]string{"CONVERGED", "STALE"},
	}
	const shown = "certdrift audit at 2026-11-26 04:00:44 UTC\n" +
		"  web  CONVERGED  serial 71200b893014…  10.0.0.7\n" +
		"  endpoint 127.0.0.1:40811 changed 3s ago\n"
	file := func(body string) string {
		return "# t\n\n<!-- BEGIN x audit: kept by a test -->\n```text\n" + body + "```\n<!-- END x audit -->\n\nmore\n"
	}
	for name, c := range map[string]struct {
		text, got string
		wantErr   string // a substring of the error; empty: no error
	}{
		"Same":           {text: file(shown), got: shown},
		"VolatileParts":  {text: file(shown), got: strings.NewReplacer("04:00:44", "05:10:02", "71200b893014", "a5e0c33f9d21", "10.0.0.7", "10.0.1.12", "40811", "39001", "3s", "2.5s", "  web  ", " web   ").Replace(shown) + "\n\n"},
		"ChangedVerdict": {text: file(strings.Replace(shown, "CONVERGED", "STALE", 1)), got: shown, wantErr: "not what this run printed"},
		"ChangedWording": {text: file(shown), got: strings.Replace(shown, "changed", "rotated", 1), wantErr: "not what this run printed"},
		"MissingLine":    {text: file(shown), got: shown + "  one more line\n", wantErr: "not what this run printed"},
		"NoControl":      {text: file("clean\n"), got: "clean\n", wantErr: "control change"},
		"NoBlock":        {text: "# t\n", got: shown, wantErr: "has no x audit block"},
		"NoFence":        {text: "<!-- BEGIN x audit -->\n" + shown + "```\n<!-- END x audit -->\n", got: shown, wantErr: "must be followed by"},
		"EndBeforeBegin": {text: "```\n<!-- END x audit -->\n<!-- BEGIN x audit -->\n```text\n", got: shown, wantErr: "has no x audit block"},
	} {
		t.Run(name, func(t *testing.T) {
			err := b.Compare(c.text, c.got)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("want no error, got %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("want an error with %q, got %v", c.wantErr, err)
			}
		})
	}
}

// TestControlCatchesHidingRule: a rule that erases the verdict is caught by the control.
func TestControlCatchesHidingRule(t *testing.T) {
	b := Block{Name: "x", Rules: []Rule{{Re: regexp.MustCompile(`CONVERGED|STALE`), With: "<state>"}}, Control: [2]string{"CONVERGED", "STALE"}}
	text := "<!-- BEGIN x -->\n```text\nweb CONVERGED\n```\n<!-- END x -->\n"
	if err := b.Compare(text, "web CONVERGED\n"); err == nil || !strings.Contains(err.Error(), "hides the control change") {
		t.Errorf("want the control to catch a rule that hides the state, got %v", err)
	}
}
