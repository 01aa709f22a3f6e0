package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestResolve: the ldflags win; without them the go command's build info gives the version
// of a `go install …@version` build and the commit of a build in a checkout.
func TestResolve(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	info := func(v string, settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "github.com/certdrift/certdrift", Version: v}, Settings: settings}
	}
	cases := map[string]struct {
		reason                      string
		ldVersion, ldCommit, ldDate string
		bi                          *debug.BuildInfo
		want                        Info
	}{
		"LdflagsWin": {
			reason:    "make build, GoReleaser and ko stamp all three; build info must not override them",
			ldVersion: "v1.2.3", ldCommit: "abc", ldDate: "2026-01-02T03:04:05Z",
			bi:   info("v9.9.9", vcs("vcs.revision", "fff", "vcs.time", "2020-01-01T00:00:00Z")...),
			want: Info{Version: "v1.2.3", Commit: "abc", Date: "2026-01-02T03:04:05Z"},
		},
		"GoInstallTag": {
			reason: "go install …@v1.2.3 builds from the module cache: a module version, no VCS settings",
			bi:     info("v1.2.3"),
			want:   Info{Version: "v1.2.3", Commit: "unknown", Date: "unknown"},
		},
		"GoInstallPseudoVersion": {
			reason: "go install …@<commit> or @main records a pseudo-version, which names the commit",
			bi:     info("v0.0.0-20260102030405-abcdef123456"),
			want:   Info{Version: "v0.0.0-20260102030405-abcdef123456", Commit: "abcdef123456", Date: "unknown"},
		},
		"CheckoutBuild": {
			reason: "go build in a checkout: version (devel), VCS settings present",
			bi:     info("(devel)", vcs("vcs", "git", "vcs.revision", "e1b8140a4c75", "vcs.time", "2026-11-26T02:12:24Z", "vcs.modified", "true")...),
			want:   Info{Version: "dev", Commit: "e1b8140a4c75-dirty", Date: "2026-11-26T02:12:24Z"},
		},
		"NoBuildInfo": {
			reason: "a binary built without module support has no build info",
			want:   Info{Version: "dev", Commit: "unknown", Date: "unknown"},
		},
		"PartialLdflags": {
			reason:    "only the version stamped: the commit still comes from build info",
			ldVersion: "v1.0.0",
			bi:        info("(devel)", vcs("vcs.revision", "0123")...),
			want:      Info{Version: "v1.0.0", Commit: "0123", Date: "unknown"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Resolve(tc.ldVersion, tc.ldCommit, tc.ldDate, tc.bi)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// TestText: the lines `certdrift version` prints, in order, each field in its place.
func TestText(t *testing.T) {
	got := Info{Version: "v1.2.3", Commit: "abc", Date: "2026-01-02T03:04:05Z", GoVersion: "go1.26"}.Text()
	want := "certdrift v1.2.3\ncommit: abc\nbuilt: 2026-01-02T03:04:05Z\ngo: go1.26"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Text (-want +got):\n%s", diff)
	}
}
