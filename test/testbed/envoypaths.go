package testbed

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// PathMode is how an Envoy container on a node agent sees its pod's volumes.
type PathMode string

const (
	// PathsAuto (the zero value) picks PathsMountNS when the test runs as root on Linux, else
	// PathsRewrite; $CERTDRIFT_TESTBED_PATHS overrides it.
	PathsAuto PathMode = ""
	// PathsMountNS runs each Envoy in its own mount namespace with every volume bind-mounted at
	// its mountPath, so Envoy's /certs, /config_dump and watched directories show the container
	// paths a real cluster shows (/etc/envoy/tls/tls.crt). Needs root (CAP_SYS_ADMIN).
	PathsMountNS PathMode = "mountns"
	// PathsRewrite runs Envoy in the host's mount namespace and rewrites every mountPath in its
	// arguments and config files to the node directory holding the volume, so Envoy reports node
	// paths (/tmp/certdrift-testbed-…/volumes/tls/tls.crt). Needs no privileges.
	PathsRewrite PathMode = "rewrite"
)

// PathModeEnv overrides Options.EnvoyPaths when that is PathsAuto: "mountns" or "rewrite".
const PathModeEnv = "CERTDRIFT_TESTBED_PATHS"

// resolvePathMode turns the configured mode into the one the nodes use. Asking for the mount
// namespaces without root is an error rather than a silent fallback: a run that claims to
// exercise container paths must do so.
func resolvePathMode(m PathMode) (PathMode, error) {
	if m == PathsAuto {
		env := strings.TrimSpace(os.Getenv(PathModeEnv))
		switch PathMode(env) {
		case PathsAuto:
			if os.Geteuid() == 0 && runtime.GOOS == "linux" {
				return PathsMountNS, nil
			}
			return PathsRewrite, nil
		case PathsMountNS, PathsRewrite:
			m = PathMode(env)
		default:
			return "", fmt.Errorf("$%s=%q: want %q or %q", PathModeEnv, env, PathsMountNS, PathsRewrite)
		}
	}
	switch m {
	case PathsRewrite:
		return m, nil
	case PathsMountNS:
		if runtime.GOOS != "linux" {
			return "", fmt.Errorf("envoy path mode %q needs Linux mount namespaces; use %s=%s", m, PathModeEnv, PathsRewrite)
		}
		if os.Geteuid() != 0 {
			return "", fmt.Errorf("envoy path mode %q needs root (a mount namespace per Envoy, CAP_SYS_ADMIN); run as root or use %s=%s", m, PathModeEnv, PathsRewrite)
		}
		return m, nil
	}
	return "", fmt.Errorf("envoy path mode %q: want %q or %q", m, PathsMountNS, PathsRewrite)
}
