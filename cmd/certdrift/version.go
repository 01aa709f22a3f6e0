package main

import (
	"fmt"
	"log/slog"
	"runtime"
)

// Set at build time: go build -ldflags "-X main.version=v1.2.3 -X main.commit=abc123".
var (
	version = "dev"
	commit  = "dev"
)

// buildInfo describes this binary; it is bound into commands and will label certdrift_build_info.
type buildInfo struct {
	Version, Commit, GoVersion string
}

func currentBuild() buildInfo {
	return buildInfo{Version: version, Commit: commit, GoVersion: runtime.Version()}
}

type versionCmd struct{}

func (versionCmd) Run(io *streams, b buildInfo, _ *slog.Logger) error {
	_, err := fmt.Fprintln(io.Out, b.text())
	return err
}

// text is what `certdrift version` and `certdrift --version` print (without the final newline).
func (b buildInfo) text() string {
	return fmt.Sprintf("certdrift %s\ncommit: %s\ngo: %s", b.Version, b.Commit, b.GoVersion)
}
