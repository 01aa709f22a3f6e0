package main

import (
	"fmt"
	"log/slog"

	"github.com/certdrift/certdrift/internal/buildinfo"
)

// Set at build time from scripts/version.sh, the one version source (make build, GoReleaser, ko):
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=<sha> -X main.date=2026-01-02T03:04:05Z"
//
// Left empty, they are filled from the module's build info (buildinfo.Resolve).
var (
	version string
	commit  string
	date    string
)

// buildInfo describes this binary; it is bound into commands and labels certdrift_build_info.
type buildInfo = buildinfo.Info

func currentBuild() buildInfo { return buildinfo.Current(version, commit, date) }

type versionCmd struct{}

func (versionCmd) Run(io *streams, b buildInfo, _ *slog.Logger) error {
	_, err := fmt.Fprintln(io.Out, b.Text())
	return err
}
