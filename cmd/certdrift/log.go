package main

import (
	"fmt"
	"io"
	"log/slog"
)

// logFlags configure the one logger, which writes to stderr so that stdout holds only the report.
type logFlags struct {
	Level  string `default:"info" enum:"debug,info,warn,error" env:"CERTDRIFT_LOG_LEVEL" help:"Log level: ${enum}."`
	Format string `default:"text" enum:"text,json" env:"CERTDRIFT_LOG_FORMAT" help:"Log format: ${enum}."`
}

func (f logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.Level)); err != nil {
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
