package testbed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// How an Envoy container sees its pod without a container runtime.
//
// Paths, in one of two modes (envoypaths.go). PathsMountNS, the default as root: each Envoy runs
// in its own mount namespace with every volume bind-mounted at its mountPath (binds, below), so
// Envoy's admin reports the container paths a real cluster shows, and certdrift's binding from
// container paths to volume mounts is exercised for real. PathsRewrite, without root: every
// volumeMount's mountPath is rewritten to the directory that holds the volume on the node
// (<pod dir>/volumes/<name>, or the subPath copy), in Envoy's arguments and in every config file
// Envoy reads: the bootstrap (-c, --config-yaml) and the files named by path_config_source
// (file-based SDS, LDS, CDS); a path is recognised only as a whole string with a mountPath
// prefix (which is how Envoy config names files). Either way the rewritten configs are rendered
// into the container directory.
//
// The bootstrap is rendered at each container start, because Envoy reads it once: a ConfigMap
// update reaches Envoy on the next restart, exactly as in a cluster. A rendered
// path_config_source copy is refreshed after every volume sync, written in place (not renamed)
// so that Envoy notices it only when its own watch fires (a move into the watched directory),
// as it would with the original file.
//
// Addresses: socket addresses on 0.0.0.0, ::, or the pod IP bind the pod IP; addresses in
// 127.0.0.0/24, ::1 and "localhost" bind the pod's private localhost (127.1.N.M), so a listener
// that is localhost-only in a cluster (Istio's admin on 15000, Envoy Gateway's on 19000) is
// unreachable from other pods here too. Upstream addresses are rewritten the same way, so a
// cluster pointing at 127.0.0.1 reaches the pod's own localhost. The rest of 127/8 is left
// alone: there live the other pods' IPs (127.0.N.M, N ≥ 1) and whatever a test puts on loopback
// in place of a Service (there is no kube-proxy), so that one pod can reach another; in a real
// pod all of 127/8 is its own, but nothing here depends on the difference.

// mount is one volumeMount as seen on the node.
type mount struct{ path, host string }

// mountTable maps container paths to node paths, longest mountPath first so that nested mounts
// win.
type mountTable []mount

func newMountTable(ms []mount) mountTable {
	t := mountTable(slicesClone(ms))
	sort.SliceStable(t, func(i, j int) bool { return len(t[i].path) > len(t[j].path) })
	return t
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// rewrite maps a container path to the node, if it lies under a mount.
func (t mountTable) rewrite(s string) (string, bool) {
	for _, m := range t {
		p := strings.TrimSuffix(m.path, "/")
		if p == "" {
			continue // a mount at "/" would swallow every path
		}
		if s == p || strings.HasPrefix(s, p+"/") {
			return m.host + s[len(p):], true
		}
	}
	return s, false
}

// podNet is what address rewriting needs to know.
type podNet struct {
	podIP, localIP netip.Addr
	// resolve maps a Service's cluster DNS name and port to the testbed's relay for it
	// (services.go); nil leaves names alone.
	resolve func(host string, port int) (netip.AddrPort, bool)
	// identity rewrites nothing: the rendering of a config as it is, for comparison.
	identity bool
}

func (n podNet) rewriteAddress(a string) string {
	if n.identity {
		return a
	}
	switch strings.ToLower(a) {
	case "", "0.0.0.0", "::", "0:0:0:0:0:0:0:0", n.podIP.String():
		return n.podIP.String()
	case "localhost", "::1":
		return n.localIP.String()
	}
	if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
		if b := ip.As4(); b[0] == 127 && b[1] == 0 && b[2] == 0 {
			return n.localIP.String()
		}
	}
	return a
}

// resolveService returns the relay for a socket_address naming a Service by its cluster DNS name.
func (n podNet) resolveService(addr string, port any) (netip.AddrPort, bool) {
	if n.resolve == nil {
		return netip.AddrPort{}, false
	}
	p, err := strconv.Atoi(fmt.Sprint(port))
	if err != nil {
		return netip.AddrPort{}, false
	}
	return n.resolve(addr, p)
}

// maxConfigSize bounds a config file the agent reads and rewrites.
const maxConfigSize = 4 << 20

// rewriteConfig rewrites paths and socket addresses in a decoded Envoy config (JSON tree), and
// collects path_config_source paths, which name further config files to render.
func rewriteConfig(v any, mounts mountTable, net podNet, sources *[]string) any {
	switch x := v.(type) {
	case map[string]any:
		if sa, ok := x["socket_address"].(map[string]any); ok {
			addr, _ := sa["address"].(string)
			if ap, ok := net.resolveService(addr, sa["port_value"]); ok {
				sa["address"] = ap.Addr().String()
				sa["port_value"] = json.Number(strconv.Itoa(int(ap.Port())))
			} else if na := net.rewriteAddress(addr); na != addr {
				sa["address"] = na
				delete(sa, "ipv4_compat")
			}
		}
		for k, val := range x {
			x[k] = rewriteConfig(val, mounts, net, sources)
		}
		if pcs, ok := x["path_config_source"].(map[string]any); ok {
			if p, ok := pcs["path"].(string); ok {
				*sources = append(*sources, p)
			}
		}
		return x
	case []any:
		for i := range x {
			x[i] = rewriteConfig(x[i], mounts, net, sources)
		}
		return x
	case string:
		s, _ := mounts.rewrite(x)
		return s
	default:
		return v
	}
}

// renderConfig decodes a YAML or JSON Envoy config, rewrites it, and returns it as JSON (which
// Envoy's YAML loader accepts) with the path_config_source paths it names.
func renderConfig(data []byte, mounts mountTable, net podNet) ([]byte, []string, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, fmt.Errorf("decode YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber() // keep 64-bit integers exact
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, nil, fmt.Errorf("decode JSON: %w", err)
	}
	var sources []string
	tree = rewriteConfig(tree, mounts, net, &sources)
	out, err := json.MarshalIndent(tree, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("encode rewritten config: %w", err)
	}
	return append(out, '\n'), sources, nil
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxConfigSize)
	}
	return data, nil
}

// envoyArgs turns a container's command and args into Envoy's arguments: the image's
// entrypoint is Envoy (or docker-entrypoint.sh, which runs it), and the image's default command
// is "-c /etc/envoy/envoy.yaml".
func envoyArgs(command, args []string) ([]string, error) {
	argv := append(slicesClone(command), args...)
	if len(command) > 0 {
		switch filepath.Base(command[0]) {
		case "envoy", "docker-entrypoint.sh":
			argv = argv[1:]
		default:
			return nil, fmt.Errorf("command %q is not envoy: the testbed runs only Envoy itself in Envoy images", command[0])
		}
	}
	if len(argv) > 0 && filepath.Base(argv[0]) == "envoy" {
		argv = argv[1:] // docker-entrypoint.sh envoy -c ...
	}
	if len(argv) == 0 {
		argv = []string{"-c", "/etc/envoy/envoy.yaml"}
	}
	return argv, nil
}

// Flags the agent owns: they are removed from the container's arguments and set by the agent.
var (
	ownedFlagsWithValue = map[string]bool{"--concurrency": true, "--log-path": true, "--base-id": true,
		"--base-id-path": true, "--admin-address-path": true, "--restart-epoch": true, "--file-flush-interval-msec": true}
	ownedFlags = map[string]bool{"--disable-hot-restart": true, "--use-dynamic-base-id": true}
)

// parsedArgs are Envoy arguments split into what the agent handles and the rest.
type parsedArgs struct {
	configPath string // -c / --config-path, already mapped to the node
	configYAML string // --config-yaml
	rest       []string
}

func parseEnvoyArgs(argv []string, mounts mountTable) (parsedArgs, error) {
	var p parsedArgs
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		name, value, hasValue := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "--") {
			name, hasValue = a, false
		}
		takeValue := func() (string, error) {
			if hasValue {
				return value, nil
			}
			if i+1 >= len(argv) {
				return "", fmt.Errorf("flag %s has no value", name)
			}
			i++
			return argv[i], nil
		}
		switch {
		case name == "-c" || name == "--config-path":
			v, err := takeValue()
			if err != nil {
				return p, err
			}
			p.configPath, _ = mounts.rewrite(v)
		case name == "--config-yaml":
			v, err := takeValue()
			if err != nil {
				return p, err
			}
			p.configYAML = v
		case ownedFlagsWithValue[name]:
			if _, err := takeValue(); err != nil {
				return p, err
			}
		case ownedFlags[name]:
		default:
			if hasValue {
				v, _ := mounts.rewrite(value)
				p.rest = append(p.rest, name+"="+v)
			} else {
				v, _ := mounts.rewrite(a)
				p.rest = append(p.rest, v)
			}
		}
	}
	if p.configPath == "" && p.configYAML == "" {
		return p, errors.New("no -c/--config-path or --config-yaml in the Envoy arguments")
	}
	return p, nil
}

var varRefRE = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expandVars applies the kubelet's $(VAR) expansion to a command or argument: defined variables
// are replaced, undefined references stay as written, and $$ escapes a dollar.
func expandVars(s string, env map[string]string) string {
	return varRefRE.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// binds are the container's volume mounts as bind mounts for its mount namespace (PathsMountNS):
// each volume's node directory at its mountPath, so the kubelet's atomic-writer layout (the
// "..data" symlink and its swap) is what the container sees. A subPath mount binds the file or
// directory at that path inside the volume as it resolves when the container starts, symlinks
// followed, exactly as the kubelet does: it pins that version and never sees a later "..data"
// swap (kubernetes/kubernetes#50345). Secret, ConfigMap, downwardAPI and projected volumes are
// read-only whatever the mount says, as the kubelet has mounted them since 1.9.4
// (CVE-2017-1002102); other volumes follow readOnly. A mountPath that would hide the agent's
// own files from Envoy (its container directory, the Envoy binary) is refused, saying so.
func (c *container) binds(binary string) ([]bindMount, error) {
	var out []bindMount
	for _, vm := range c.spec.VolumeMounts {
		target := filepath.Clean(vm.MountPath)
		if !filepath.IsAbs(target) || target == "/" {
			return nil, fmt.Errorf("volumeMount %q (volume %q): mountPath must be an absolute path other than /", vm.MountPath, vm.Name)
		}
		for _, own := range []string{c.dir, binary} {
			if own != "" && (own == target || strings.HasPrefix(own, target+"/")) {
				return nil, fmt.Errorf("volumeMount %s (volume %q) would hide %s, which the node agent runs Envoy with; use another mountPath or %s=%s", vm.MountPath, vm.Name, own, PathModeEnv, PathsRewrite)
			}
		}
		v, ok := c.volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %s names volume %q, which the pod does not have", vm.MountPath, vm.Name)
		}
		source := c.w.volumeDir(vm.Name)
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			sub = expandVars(vm.SubPathExpr, c.env)
		}
		if sub != "" {
			var err error
			if source, err = resolveSubPath(source, sub); err != nil {
				return nil, fmt.Errorf("volumeMount %s (volume %q): %w", vm.MountPath, vm.Name, err)
			}
		}
		ro := vm.ReadOnly || v.Secret != nil || v.ConfigMap != nil || v.DownwardAPI != nil || v.Projected != nil
		out = append(out, bindMount{source: source, target: target, readOnly: ro})
	}
	return out, nil
}

// resolveSubPath is the node path a subPath bind mounts: subPath inside the volume with its
// symlinks resolved (the kubelet binds the resolved inode), which must stay inside the volume.
// A subPath that does not exist is created as a directory, as the kubelet does.
func resolveSubPath(volDir, subPath string) (string, error) {
	if filepath.IsAbs(subPath) || slices.Contains(strings.Split(subPath, "/"), "..") {
		return "", fmt.Errorf("subPath %q must be a relative path without '..'", subPath)
	}
	src := filepath.Join(volDir, subPath)
	if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(src, 0o755); err != nil {
			return "", fmt.Errorf("subPath %q: %w", subPath, err)
		}
	}
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return "", fmt.Errorf("subPath %q: %w", subPath, err)
	}
	root, err := filepath.EvalSymlinks(volDir)
	if err != nil {
		return "", fmt.Errorf("subPath %q: %w", subPath, err)
	}
	if real != root && !strings.HasPrefix(real, root+"/") {
		return "", fmt.Errorf("subPath %q resolves to %s, outside its volume", subPath, real)
	}
	return real, nil
}

// rendersUnchanged says whether rendering the config file at path would change nothing but its
// formatting (PathsMountNS: no address or Service name to rewrite), so Envoy can read the file
// itself.
func rendersUnchanged(path string, net podNet) (bool, error) {
	data, err := readLimited(path)
	if err != nil {
		return false, fmt.Errorf("read config source: %w", err)
	}
	rendered, _, err := renderConfig(data, nil, net)
	if err != nil {
		return false, fmt.Errorf("config source %s: %w", path, err)
	}
	canonical, _, err := renderConfig(data, nil, podNet{identity: true})
	if err != nil {
		return false, fmt.Errorf("config source %s: %w", path, err)
	}
	return bytes.Equal(rendered, canonical), nil
}
