// Command certdrift compares the desired, loaded and served views of every TLS certificate used by
// Envoy and reports drift as findings. This package owns flags, wiring, signals and exit codes;
// everything it judges comes from the audit package and everything it observes from probe.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"
)

// Exit codes are an interface for scripts and CI: 0 clean, 1 findings at or above --fail-on,
// 2 could not run (bad flags, bad config, I/O failure writing the report).
const (
	exitClean    = 0
	exitFindings = 1
	exitNoRun    = 2
)

// cli is the root of the command line.
type cli struct {
	Log         logFlags         `embed:"" prefix:"log."`
	VersionFlag kong.VersionFlag `name:"version" help:"Print the version, commit and Go version, and exit."`

	Audit     auditCmd     `cmd:"" help:"Compare desired, loaded and served certificates once and report the findings."`
	Preflight preflightCmd `cmd:"" help:"Before a rotation: which peers would reject the candidate leaf or CA bundle, which Envoys reload it by themselves and which need a restart, and the safe order."`
	Serve     serveCmd     `cmd:"" help:"Keep comparing and expose views, findings, drift age and rotation convergence as Prometheus metrics."`
	Version   versionCmd   `cmd:"" help:"Print the version, commit and Go version."`
	Help      helpCmd      `cmd:"" help:"Show help for a command: certdrift help audit."`

	Healthcheck healthcheckCmd `cmd:"" help:"GET /-/ready and /metrics of a running certdrift serve over plain HTTP; exit 0 when both answer 200 with certdrift's exposition (the Helm chart's helm test pod)."`
}

// streams are where commands write: bound so that tests and future commands need not use globals.
type streams struct {
	Out, Err io.Writer
}

// exitError carries an exit code through kong's Run to main. A silent error has already told the
// user what happened (e.g. the findings table), so main prints nothing more.
type exitError struct {
	code   int
	err    error
	silent bool
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// ExitCode implements kong.ExitCoder.
func (e *exitError) ExitCode() int { return e.code }

// noRun marks err as "could not run" (exit 2).
func noRun(err error) error { return &exitError{code: exitNoRun, err: err} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], streams{Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}

// commandName is the chosen command's first word ("audit", "serve"), for command-dependent
// defaults.
func commandName(kctx *kong.Context) string {
	if f := strings.Fields(kctx.Command()); len(f) > 0 {
		return f[0]
	}
	return ""
}

// run parses args, runs the chosen command and returns the process exit code.
func run(ctx context.Context, args []string, io streams) int {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("certdrift"),
		kong.Description("Find Envoy proxies that serve or hold a certificate other than the one you deployed."),
		kong.Writers(io.Out, io.Err),
		kong.UsageOnError(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Vars{"version": currentBuild().Text()},
		kong.ExplicitGroups(flagGroups),
	)
	if err != nil {
		// The CLI model itself is wrong: a programming error, but still not a crash.
		fmt.Fprintf(io.Err, "certdrift: %v\n", err)
		return exitNoRun
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		// kong uses 80 for usage errors; certdrift promises 2 for anything that stops it running.
		var perr *kong.ParseError
		if errors.As(err, &perr) && perr.Context != nil {
			// Usage after a mistake goes to stderr: stdout is for reports only.
			parser.Stdout = io.Err
			_ = perr.Context.PrintUsage(true)
			parser.Stdout = io.Out
		}
		parser.Errorf("%s", err)
		return exitNoRun
	}
	log, err := c.Log.logger(io.Err, commandName(kctx))
	if err != nil {
		parser.Errorf("%s", err)
		return exitNoRun
	}
	kctx.BindTo(ctx, (*context.Context)(nil))
	err = kctx.Run(log, &io, currentBuild())
	if err == nil {
		return exitClean
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if !ee.silent {
			parser.Errorf("%s", err)
		}
		return ee.code
	}
	parser.Errorf("%s", err)
	return exitNoRun
}
