package main

import (
	_ "embed"
	"fmt"
	"log/slog"
	"strings"

	"github.com/alecthomas/kong"
)

// flagGroups order `--help`: the flags every run needs come first (ungrouped), then the ones only
// one mode or feature reads, each under a title that says when it applies.
var flagGroups = []kong.Group{
	{Key: "kube", Title: "Kubernetes mode (with --kubeconfig or --in-cluster):"},
	{Key: "repair", Title: "Repair (docs/repair.md):"},
	{Key: "web", Title: "Exposition (the metrics and probe ports):"},
}

// helpCmd is `certdrift help [command]`: the same text as `certdrift [command] --help`, for people
// who type help the way git and kubectl taught them.
type helpCmd struct {
	Command []string `arg:"" optional:"" help:"The command to describe (none: the overview)."`
}

func (h *helpCmd) Run(kctx *kong.Context, _ *slog.Logger) error {
	// Trace resolves the words as a command path without running anything or exiting.
	target, err := kong.Trace(kctx.Kong, h.Command)
	if err != nil {
		return noRun(err)
	}
	if target.Error != nil {
		return noRun(fmt.Errorf("help %s: %w", strings.Join(h.Command, " "), target.Error))
	}
	if err := target.PrintUsage(false); err != nil {
		return noRun(err)
	}
	return nil
}

// The examples and exit codes `certdrift audit|preflight|serve --help` print below the command's
// summary (kong prints a command's Help()), kept as plain text beside this file.
var (
	//go:embed help/audit.txt
	auditHelp string
	//go:embed help/preflight.txt
	preflightHelp string
	//go:embed help/serve.txt
	serveHelp string
)

func (auditCmd) Help() string     { return strings.TrimSuffix(auditHelp, "\n") }
func (preflightCmd) Help() string { return strings.TrimSuffix(preflightHelp, "\n") }
func (serveCmd) Help() string     { return strings.TrimSuffix(serveHelp, "\n") }
