// Package buildinfo resolves what a certdrift binary says about itself (certdrift version,
// certdrift_build_info): the values stamped at link time where set, else what the go command
// recorded in the binary.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"golang.org/x/mod/module"
)

// Info describes one binary.
type Info struct {
	Version, Commit, Date, GoVersion string
}

// Current is Resolve on this binary's build info, with the Go version it was built with.
func Current(ldVersion, ldCommit, ldDate string) Info {
	bi, _ := debug.ReadBuildInfo()
	b := Resolve(ldVersion, ldCommit, ldDate, bi)
	b.GoVersion = runtime.Version()
	return b
}

// Resolve resolves the version, commit and date: the ldflags values where set, else what the go
// command recorded. `go install github.com/certdrift/certdrift/cmd/certdrift@v1.2.3` records the
// module version (v1.2.3, or a pseudo-version for a commit) but no VCS settings, since it builds
// from the module cache; a `go build` in a git checkout records vcs.revision, vcs.time and
// vcs.modified (unless -buildvcs=false) and the module version "(devel)". Whatever is still
// unknown is "dev" (version) or "unknown".
func Resolve(ldVersion, ldCommit, ldDate string, bi *debug.BuildInfo) Info {
	b := Info{Version: ldVersion, Commit: ldCommit, Date: ldDate}
	if bi != nil {
		var modified bool
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		modified = settings["vcs.modified"] == "true"
		if b.Version == "" {
			if v := bi.Main.Version; v != "" && v != "(devel)" {
				b.Version = v
			}
		}
		if b.Commit == "" {
			if rev := settings["vcs.revision"]; rev != "" {
				b.Commit = rev
				if modified {
					b.Commit += "-dirty"
				}
			} else if rev := pseudoRevision(bi.Main.Version); rev != "" {
				// A pseudo-version names its commit (the 12-character prefix Go keeps).
				b.Commit = rev
			}
		}
		if b.Date == "" {
			b.Date = settings["vcs.time"]
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.Date == "" {
		b.Date = "unknown"
	}
	return b
}

// pseudoRevision returns the commit prefix of a pseudo-version (v0.0.0-20260102030405-abcdef123456),
// or "" for a release version.
func pseudoRevision(v string) string {
	if !module.IsPseudoVersion(v) {
		return ""
	}
	rev, err := module.PseudoVersionRev(v)
	if err != nil {
		return ""
	}
	return rev
}

// Text is what `certdrift version` and `certdrift --version` print (without the final newline).
func (b Info) Text() string {
	return fmt.Sprintf("certdrift %s\ncommit: %s\nbuilt: %s\ngo: %s", b.Version, b.Commit, b.Date, b.GoVersion)
}
