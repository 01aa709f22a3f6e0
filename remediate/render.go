package remediate

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

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

// RenderTable writes the results as the table that follows the audit's own.
func RenderTable(w io.Writer, dryRun bool, results []Result) error {
	head := "reload"
	if dryRun {
		head = "reload plan (dry run: add --yes to act)"
	}
	fmt.Fprintf(w, "\n%s\n", head)
	if len(results) == 0 {
		_, err := fmt.Fprintln(w, "  nothing to reload: no Envoy is proven stale")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  STRATEGY\tTARGET\tOUTCOME\tDETAIL")
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
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", strategy, target, outcome, detail)
	}
	return tw.Flush()
}

// Failed counts the results that make a repair run unsuccessful: refused, failed, or skipped
// because the workload is blocked by an earlier failed action.
func Failed(results []Result) int {
	var bad int
	for _, res := range results {
		if res.Outcome == OutcomeFailed || res.Outcome == OutcomeRefused || res.Skip == SkipBlocked {
			bad++
		}
	}
	return bad
}
