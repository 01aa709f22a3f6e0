// Package readmeblock keeps the output blocks README.md shows true: a test that produced the
// output compares it with the block between two HTML comment markers, up to what changes from run
// to run, and with -update rewrites the block. TestDemo (test/demo) and TestEGGateway
// (test/scenarios) share it so that both blocks are normalized the same way.
package readmeblock

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Rule replaces what matches Re with With before the comparison.
type Rule struct {
	Re   *regexp.Regexp
	With string
}

// Volatile are the parts of certdrift's table output that differ between runs of the same story:
// report times, serials and fingerprints, loopback ports, durations. Column widths follow them,
// so Normalize also folds runs of spaces.
var Volatile = []Rule{
	{regexp.MustCompile(`\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC\b`), "<time>"},
	{regexp.MustCompile(`\b[0-9a-f]{8,}\b`), "<hex>"},
	{regexp.MustCompile(`127\.0\.0\.1:[0-9]+`), "127.0.0.1:<port>"},
	{regexp.MustCompile(`\b([0-9]+(\.[0-9]+)?(ns|µs|ms|s|m|h))+\b`), "<duration>"},
}

// Block is one marked block of a Markdown file: the lines
//
//	<!-- BEGIN <Name>...-->
//	```text
//	...
//	```
//	<!-- END <Name> -->
type Block struct {
	Path   string // the Markdown file
	Name   string // what follows "BEGIN " and "END " in the markers
	Update string // the command that rewrites it, for the failure message
	Rules  []Rule // applied in order, before Volatile
	// Control is a change of the output that the comparison must notice (old, new); Check
	// fails if normalizing hides it, so that the rules cannot grow to hide a verdict.
	Control [2]string
}

// Check compares the block with got, or rewrites the block with got when update is set.
func (b Block) Check(t testing.TB, got string, update bool) {
	t.Helper()
	raw, err := os.ReadFile(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	if update {
		begin, end, err := b.find(text)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b.Path, []byte(text[:begin]+tidy(got)+text[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the %s block in %s", b.Name, b.Path)
		return
	}
	if err := b.Compare(text, got); err != nil {
		t.Error(err)
	}
}

// Compare returns an error when the block in text differs from got after normalizing, or when
// normalizing would hide the Control change.
func (b Block) Compare(text, got string) error {
	begin, end, err := b.find(text)
	if err != nil {
		return err
	}
	got = tidy(got)
	if diff := cmp.Diff(b.Normalize(text[begin:end]), b.Normalize(got)); diff != "" {
		return fmt.Errorf("%s's %s block is not what this run printed (-file +run, after normalizing):\n%s\n"+
			"If the change is intended: %s, and review the diff", b.Path, b.Name, diff, b.Update)
	}
	if old, repl := b.Control[0], b.Control[1]; old == "" || !strings.Contains(got, old) {
		return fmt.Errorf("the control change %q -> %q does not apply to this run's output", old, repl)
	} else if cmp.Equal(b.Normalize(got), b.Normalize(strings.Replace(got, old, repl, 1))) {
		return fmt.Errorf("normalizing hides the control change %q -> %q", old, repl)
	}
	return nil
}

// find returns the byte range of the block's content: after the BEGIN marker line and the opening
// fence, up to the closing fence before the END marker.
func (b Block) find(text string) (int, int, error) {
	const open, close = "```text\n", "```\n"
	i := strings.Index(text, "<!-- BEGIN "+b.Name)
	endMarker := close + "<!-- END " + b.Name + " -->"
	j := strings.Index(text, endMarker)
	if i < 0 || j < i {
		return 0, 0, fmt.Errorf("%s has no %s block (<!-- BEGIN %s ... --> ... <!-- END %s -->)", b.Path, b.Name, b.Name, b.Name)
	}
	nl := strings.Index(text[i:], "-->\n")
	if nl < 0 || !strings.HasPrefix(text[i+nl+4:], open) {
		return 0, 0, fmt.Errorf("%s: the %s block's BEGIN marker must be followed by a line %q", b.Path, b.Name, strings.TrimSpace(open))
	}
	begin := i + nl + 4 + len(open)
	if begin > j {
		return 0, 0, fmt.Errorf("%s: the %s block is malformed", b.Path, b.Name)
	}
	return begin, j, nil
}

// tidy drops trailing spaces and blank lines, which Markdown editors drop too.
func tidy(s string) string {
	lines := strings.Split(strings.TrimRight(s, " \n"), "\n")
	for k := range lines {
		lines[k] = strings.TrimRight(lines[k], " ")
	}
	return strings.Join(lines, "\n") + "\n"
}

// Normalize applies the block's rules and Volatile to every line, folds runs of spaces (column
// widths follow the replaced parts) and drops empty lines.
func (b Block) Normalize(s string) []string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		for _, r := range b.Rules {
			l = r.Re.ReplaceAllString(l, r.With)
		}
		for _, r := range Volatile {
			l = r.Re.ReplaceAllString(l, r.With)
		}
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
