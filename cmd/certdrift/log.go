package main

import (
	"fmt"
	"io"
	"log/slog"
)

// logFlags configure the one logger, which writes to stderr so that stdout holds only the report.
type logFlags struct {
	// No default or enum in the tag (kong allows an enum only with a default): the level left
	// unset depends on the command (defaultLogLevel), and logger checks the value.
	Level  string `env:"CERTDRIFT_LOG_LEVEL" placeholder:"LEVEL" help:"Log level: debug, info, warn or error (default: warn for audit and the other one-shot commands, info for serve)."`
	Format string `default:"text" enum:"text,json" env:"CERTDRIFT_LOG_FORMAT" help:"Log format: ${enum}."`
}

// defaultLogLevel is the level of a command run without --log.level. A one-shot command's report
// is its stdout, and everything it found is in the report: stderr stays empty unless something
// went wrong (warn). serve is a daemon whose stderr is its only voice: info logs its start, the
// addresses it serves, reloads and shutdown, but not every round (those are debug).
func defaultLogLevel(command string) string {
	if command == "serve" {
		return "info"
	}
	return "warn"
}

func (f logFlags) logger(w io.Writer, command string) (*slog.Logger, error) {
	level := f.Level
	if level == "" {
		level = defaultLogLevel(command)
	}
	var lvl slog.Level
	switch level {
	case "debug", "info", "warn", "error":
	default:
		return nil, fmt.Errorf("--log.level %q: want debug, info, warn or error", level)
	}
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log.level %q: %w", f.Level, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch f.Format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log.format %q: want text or json", f.Format)
}
