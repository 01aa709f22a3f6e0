package remediate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/certdrift/certdrift/audit"
)

// Report is what `audit --reload -o json` prints: the audit report with the reload results
// beside its fields, one JSON document.
type Report struct {
	audit.Report
	Reload ReportSection `json:"reload"`
}

// ReportSection is the "reload" field of Report.
type ReportSection struct {
	DryRun  bool     `json:"dry_run"`
	Results []Result `json:"results"`
}

// RenderJSON writes the report and the results as one JSON document (Report).
func RenderJSON(w io.Writer, dryRun bool, results []Result, report audit.Report) error {
	s := Report{Report: report, Reload: ReportSection{DryRun: dryRun, Results: results}}
	if s.Reload.Results == nil {
		s.Reload.Results = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("write reload results: %w", err)
	}
	return nil
}

// RenderTable writes the results as the table that follows the audit's own, in its style: one
// header, a row per action (strategy, target, outcome), and what happened wrapped below the row
// at audit.TableWidth columns (the detail is a sentence, often longer than a terminal).
func RenderTable(w io.Writer, dryRun bool, results []Result) error {
	head := "RELOAD"
	if dryRun {
		head = "RELOAD PLAN (dry run: add --yes to act)"
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "\n%s\n", head)
	if len(results) == 0 {
		fmt.Fprintln(bw, "  nothing to reload: no Envoy is proven stale")
		return bw.Flush()
	}
	rows := [][3]string{{"STRATEGY", "TARGET", "OUTCOME"}}
	details := []string{""}
	for _, res := range results {
		target := res.Target.Envoy
		if target == "" {
			target = res.Target.Namespace + "/" + res.Target.Workload.Ref()
		}
		outcome := res.Outcome
		switch {
		case res.Skip != "":
			outcome += " (" + res.Skip + ")"
		case res.Reason != "":
			outcome += " (" + res.Reason + ")"
		}
		strategy := string(res.Strategy)
		if strategy == "" {
			strategy = "-"
		}
		detail := res.Detail
		if len(res.Replacements) > 0 {
			detail += " [replaced by " + strings.Join(res.Replacements, ", ") + "]"
		}
		rows = append(rows, [3]string{printable(strategy), printable(target), printable(outcome)})
		details = append(details, printable(detail))
	}
	var width [3]int
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for i, r := range rows {
		fmt.Fprintf(bw, "  %s%s  %s%s  %s\n", r[0], strings.Repeat(" ", width[0]-utf8.RuneCountInString(r[0])),
			r[1], strings.Repeat(" ", width[1]-utf8.RuneCountInString(r[1])), r[2])
		wrap(bw, "    ", details[i])
	}
	return bw.Flush()
}

// wrap writes text in lines of at most audit.TableWidth columns after indent; a word longer than
// a line stays whole.
func wrap(w io.Writer, indent, text string) {
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && utf8.RuneCountInString(indent+line+" "+word) > audit.TableWidth {
			fmt.Fprintln(w, indent+line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		fmt.Fprintln(w, indent+line)
	}
}

// printable keeps one cell on one terminal line: names and details carry text from pods,
// Envoys and errors, so control and format characters are replaced.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' '
		}
		return r
	}, s)
}

// Failed counts the results that make a repair run unsuccessful: refused, failed, or skipped
// because the workload is blocked by an earlier failed action or because certdrift could not
// check it was safe to act (RBAC refused the record Lease or the replica count): the repair that
// was asked for did not happen, which a script must not read as "findings, nothing tried".
func Failed(results []Result) int {
	var bad int
	for _, res := range results {
		if res.Outcome == OutcomeFailed || res.Outcome == OutcomeRefused || res.Skip == SkipBlocked || res.Skip == SkipCannotCheck {
			bad++
		}
	}
	return bad
}
