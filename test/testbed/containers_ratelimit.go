package testbed

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// How a rate limit container runs (images whose repository name is "ratelimit", e.g. the
// docker.io/envoyproxy/ratelimit:<commit> Envoy Gateway deploys when global rate limiting is on):
// the real service, github.com/envoyproxy/ratelimit built by scripts/build-ratelimit.sh, with the
// container's environment, which is all of its configuration.
//
//   - Files: the process runs in a private mount namespace in which every volume the container
//     mounts is bind-mounted read-only at its mountPath (subPath mounts are refused), so it reads
//     /certs/tls.crt as in a cluster, through the kubelet's atomic-writer layout. Like the
//     certdrift containers' token mount, this needs root.
//   - Listen addresses: HOST, GRPC_HOST and DEBUG_HOST (its HTTP, gRPC and debug listeners,
//     0.0.0.0 by default) are set to the pod IP, and any env value "host:port" with an empty,
//     wildcard or loopback host (PROMETHEUS_ADDR=":19001") is moved to the pod IP or the pod's
//     private localhost: pods share the host's network here, and the kubelet's probes, the
//     Service relays and certdrift reach a pod at its IP.
//   - Service names: there is no cluster DNS. An env value "host:port" whose host names a
//     Service ("name", "name.namespace", "name.namespace.svc[.cluster.local]") is replaced by
//     the testbed's relay for that Service port (services.go): Envoy Gateway sets
//     CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001 and REDIS_URL from its config. The xDS
//     client verifies the control plane's certificate against the host it dials; when that
//     variable is rewritten, CONFIG_GRPC_XDS_SERVER_TLS_SAN (unless set) keeps the name the pod
//     would have dialed, so TLS checks what it checks in a cluster.

// RatelimitVersion is the github.com/envoyproxy/ratelimit module version
// scripts/build-ratelimit.sh builds: the newest the module proxy serves (Envoy Gateway v1.9.1's
// image, commit 8fe6ea42, is not served).
const RatelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"

// RatelimitDirEnv overrides where the ratelimit binary is found.
const RatelimitDirEnv = "CERTDRIFT_RATELIMIT_DIR"

const ratelimitHint = "build it once with `make ratelimit` (scripts/build-ratelimit.sh; later runs reuse " +
	".cache/ratelimit), or point " + RatelimitDirEnv + " at a directory holding ratelimit"

func isRatelimitImage(image string) bool { return imageRepoName(image) == "ratelimit" }

// findRatelimitBinary returns the rate limit service binary, or an error saying how to get it.
func findRatelimitBinary() (string, error) {
	dir := os.Getenv(RatelimitDirEnv)
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("locate ratelimit: %w; %s", err, ratelimitHint)
		}
		dir = filepath.Join(root, ".cache", "ratelimit", RatelimitVersion)
	}
	bin := filepath.Join(dir, "ratelimit")
	fi, err := os.Stat(bin)
	if err != nil {
		return "", fmt.Errorf("ratelimit %s: %w; %s", RatelimitVersion, err, ratelimitHint)
	}
	if fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable; %s", bin, ratelimitHint)
	}
	return bin, nil
}

// prepareRatelimit returns the binary, arguments, environment and bind mounts of a rate limit
// container.
func (c *container) prepareRatelimit() (string, []string, map[string]string, []bindMount, error) {
	bin, err := findRatelimitBinary()
	if err != nil {
		return "", nil, nil, nil, err
	}
	argv := append(slicesClone(c.spec.Command), c.spec.Args...)
	if len(argv) > 0 && filepath.Base(argv[0]) == "ratelimit" {
		argv = argv[1:]
	} else if len(c.spec.Command) > 0 {
		return "", nil, nil, nil, fmt.Errorf("command %q is not ratelimit: the testbed runs only the rate limit service in ratelimit images", c.spec.Command[0])
	}
	binds, err := c.volumeBinds()
	if err != nil {
		return "", nil, nil, nil, err
	}
	env := ratelimitEnv(c.env, c.podNet(), c.w.namespace)
	env["HOME"] = c.dir
	return bin, argv, env, binds, nil
}

// volumeBinds is every volume mount of the container as a bind mount at its mountPath.
func (c *container) volumeBinds() ([]bindMount, error) {
	var out []bindMount
	for _, vm := range c.spec.VolumeMounts {
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			return nil, errors.New("subPath mounts are not supported for this image")
		}
		// Read-only whatever the mount says: what the testbed projects is the kubelet's, and
		// the rate limit service writes nothing to its volumes.
		out = append(out, bindMount{source: c.w.volumeDir(vm.Name), target: vm.MountPath})
	}
	return out, nil
}

// ratelimitEnv is the container's environment with the listen hosts on the pod IP and Service
// names resolved to the testbed's relays (see above).
func ratelimitEnv(in map[string]string, pn podNet, namespace string) map[string]string {
	env := make(map[string]string, len(in)+4)
	for k, v := range in {
		env[k] = v
	}
	for _, k := range []string{"HOST", "GRPC_HOST", "DEBUG_HOST"} {
		env[k] = pn.rewriteAddress(env[k])
	}
	for k, v := range env {
		if a, ok := listenAddress(v, pn); ok {
			env[k] = a
			continue
		}
		addr, host, ok := serviceAddress(v, pn, namespace)
		if !ok {
			continue
		}
		env[k] = addr
		if k == "CONFIG_GRPC_XDS_SERVER_URL" && in["CONFIG_GRPC_XDS_SERVER_TLS_SAN"] == "" {
			env["CONFIG_GRPC_XDS_SERVER_TLS_SAN"] = host
		}
	}
	return env
}

// listenAddress moves "host:port" with an empty, wildcard or loopback host to the pod's
// addresses, as Envoy's socket addresses are moved (PROMETHEUS_ADDR=":19001" would otherwise
// take the port on every address of the host, the proxy's stats port among them).
func listenAddress(v string, pn podNet) (string, bool) {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", false
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", false
	}
	if h := pn.rewriteAddress(host); h != host || host == "" {
		return net.JoinHostPort(h, port), true
	}
	return "", false
}

// serviceAddress resolves "host:port" when host names a Service, relative to namespace as the
// pod's DNS search path would: name, name.namespace, name.namespace.svc[.cluster.local].
func serviceAddress(v string, pn podNet, namespace string) (addr, host string, ok bool) {
	host, port, err := net.SplitHostPort(v)
	if err != nil || host == "" || strings.ContainsAny(host, "/ ") {
		return "", "", false
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", "", false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return "", "", false
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	switch strings.Count(name, ".") {
	case 0:
		name += "." + namespace + ".svc"
	case 1:
		name += ".svc"
	}
	ap, ok := pn.resolveService(name, port)
	if !ok {
		return "", "", false
	}
	return ap.String(), host, true
}
