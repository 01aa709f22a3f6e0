package main

import (
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

// Examples shown by `certdrift audit --help` (kong prints a command's Help() below its summary).
func (auditCmd) Help() string {
	return `Exit codes: 0 clean, 1 findings at or above --fail-on (or coverage incomplete), 2 could not run, 3 a repair failed or could not be checked (--reload).

Examples:

    # Audit the Envoys and certificates named in a config file
    certdrift audit --config certdrift.yaml

    # Audit every Envoy pod of the current kubectl context; JSON for scripts
    certdrift audit --kubeconfig ~/.kube/config -o json

    # Check a config file without contacting anything
    certdrift audit --config certdrift.yaml --config.check

    # Plan reloads of the Envoys proven stale in one namespace (add --yes to act)
    certdrift audit --kubeconfig ~/.kube/config --namespace web --reload`
}

// Examples shown by `certdrift preflight --help`.
func (preflightCmd) Help() string {
	return `Exit codes: 0 the rotation is safe as planned, 1 a handshake would fail (each named: who
verifies, with which trust, which leaf from whom), 2 bad input or could not run, 3 cannot tell
(an Envoy's admin did not answer, a component's trust could not be read). docs/preflight.md
describes the checks and the JSON.

Examples:

    # A new leaf for the config's source "web": who reloads it, who needs a restart
    certdrift preflight --config certdrift.yaml --leaf web=new/tls.crt

    # Envoy Gateway's three Secrets as certgen would rewrite them (one YAML document each)
    certdrift preflight --kubeconfig ~/.kube/config --config pairings.yaml --secret rotated.yaml

    # Step 1 of a CA rotation: only the bundle [new, old] of one Secret; JSON for scripts
    certdrift preflight --kubeconfig ~/.kube/config --bundle envoy-gateway-system/envoy=bundle.pem -o json`
}

// Examples shown by `certdrift serve --help`.
func (serveCmd) Help() string {
	return `Examples:

    # Export metrics on :9809 for the Envoys in a config file
    certdrift serve --config certdrift.yaml

    # In a cluster, with the pod's ServiceAccount, one namespace
    certdrift serve --in-cluster --namespace web

    # Validate the config and flags, then exit (0 OK, 2 invalid)
    certdrift serve --config certdrift.yaml --config.check`
}
