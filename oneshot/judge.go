package oneshot

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/remediate"
)

// Output is where and how a one-shot command writes its result: a table for people, or JSON.
type Output struct {
	W    io.Writer
	JSON bool
	Log  *slog.Logger
}

// Audited is what an audit showed and, with a repair, what the repair did.
type Audited struct {
	Report audit.Report
	// Repairs are the repair's results; nil without one.
	Repairs []remediate.Result
}

// Audit judges the round (audit.Run), writes the report and, when repair is set, repairs
// (Round.Repair) and writes its results. With JSON and a repair the report and the results
// are one document (remediate.RenderJSON), so that the output stays a single JSON value.
// started is when the round began, for the log. An error means the command could not run.
func (r *Round) Audit(ctx context.Context, out Output, repair *Repair, started time.Time) (Audited, error) {
	if err := ctx.Err(); err != nil {
		return Audited{}, fmt.Errorf("audit interrupted: %w", err)
	}
	a := Audited{Report: audit.Run(r.Inputs, r.Policy, time.Now())}
	rep := a.Report
	out.Log.Info("audit finished",
		"findings", len(rep.Findings), "bindings", len(rep.Bindings),
		"envoys", rep.Summary.Envoys, "handshakes", rep.Summary.Handshakes,
		"duration_seconds", time.Since(started).Seconds())
	if repair == nil || !out.JSON {
		render := audit.RenderTable
		if out.JSON {
			render = audit.RenderJSON
		}
		if err := render(out.W, rep); err != nil {
			return a, err
		}
	}
	if repair == nil {
		return a, nil
	}
	var err error
	if a.Repairs, err = r.Repair(ctx, rep, *repair); err != nil {
		return a, fmt.Errorf("reload: %w", err)
	}
	if out.JSON {
		return a, remediate.RenderJSON(out.W, repair.DryRun, a.Repairs, rep)
	}
	return a, remediate.RenderTable(out.W, repair.DryRun, a.Repairs)
}

// Preflight judges the candidates against the round (audit.Preflight) and writes the verdict;
// auditCommand is the command the steps tell people to run afterwards. An error means the
// command could not run.
func (r *Round) Preflight(ctx context.Context, out Output, cands []desired.Candidate, auditCommand string) (audit.PreflightReport, error) {
	if err := ctx.Err(); err != nil {
		return audit.PreflightReport{}, fmt.Errorf("preflight interrupted: %w", err)
	}
	p, err := audit.Preflight(r.Inputs, cands, r.Policy, time.Now(), audit.PreflightOptions{AuditCommand: auditCommand})
	if err != nil {
		return p, err
	}
	out.Log.Info("preflight finished", "verdict", p.Verdict, "handshakes", len(p.Handshakes), "reloads", len(p.Reloads))
	render := audit.RenderPreflightTable
	if out.JSON {
		render = audit.RenderPreflightJSON
	}
	return p, render(out.W, p)
}
