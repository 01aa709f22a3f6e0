package testbed

import (
	"os"
	"strings"
	"testing"
)

// TestResolvePathMode: the default follows root, $CERTDRIFT_TESTBED_PATHS overrides it, an
// explicit option wins over both, and anything else is an error, never a silent fallback.
func TestResolvePathMode(t *testing.T) {
	root := os.Geteuid() == 0
	auto := PathsRewrite
	if root {
		auto = PathsMountNS
	}
	cases := map[string]struct {
		reason string
		opt    PathMode
		env    string
		want   PathMode
		errHas string
	}{
		"Default":        {reason: "root gets the mount namespaces, others the rewriting", want: auto},
		"EnvRewrite":     {reason: "the variable picks the rewriting, even as root", env: "rewrite", want: PathsRewrite},
		"EnvBogus":       {reason: "an unknown value is an error", env: "chroot", errHas: PathModeEnv},
		"OptionWins":     {reason: "an explicit option wins over the variable", opt: PathsRewrite, env: "mountns", want: PathsRewrite},
		"OptionBogus":    {reason: "an unknown option is an error", opt: "chroot", errHas: "want"},
		"MountNSAsAsked": {reason: "asking for the mount namespaces needs root", opt: PathsMountNS, want: PathsMountNS},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv(PathModeEnv, tc.env)
			if name == "MountNSAsAsked" && !root {
				tc.want, tc.errHas = "", "needs root"
			}
			got, err := resolvePathMode(tc.opt)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Errorf("%s: resolvePathMode(%q) with $%s=%q = %q, %v; want an error containing %q", tc.reason, tc.opt, PathModeEnv, tc.env, got, err, tc.errHas)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("%s: resolvePathMode(%q) with $%s=%q = %q, %v; want %q", tc.reason, tc.opt, PathModeEnv, tc.env, got, err, tc.want)
			}
		})
	}
}
