package testbed

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// How a certdrift container runs (images whose repository name ends in "certdrift", e.g.
// ghcr.io/certdrift/certdrift:latest): the binary given by NodeOptions.CertdriftBinary (a test
// builds ./cmd/certdrift) with the container's arguments, as the user certdrift would run as in
// a cluster — its own ServiceAccount token, nothing of the test's.
//
//   - Arguments: mountPath prefixes are rewritten to the node directories holding the volumes,
//     as for Envoy (--config=/etc/certdrift/config/config.yaml), and listen addresses with an
//     empty, wildcard or loopback host (--web.listen-address=:9809) bind the pod IP or the
//     pod's private localhost, so the kubelet probes and port-forward reach the process there.
//   - In-cluster credentials: client-go's rest.InClusterConfig reads the token and ca.crt from
//     the fixed path /var/run/secrets/kubernetes.io/serviceaccount and cannot be told another
//     one. So the process is started in a private mount namespace in which the pod's own
//     service-account volume (the kube-api-access-* projected volume the ServiceAccount
//     admission plugin adds: a TokenRequest token bound to the pod, the kube-root-ca.crt
//     ConfigMap's ca.crt, the namespace file; re-projected every sync like any volume) is
//     bind-mounted read-only at exactly that path. Pods never see each other's token, and the
//     host's path is only an empty mount point. This needs root (CAP_SYS_ADMIN); without it the
//     container fails to start with a message saying so, rather than running with other
//     credentials.
//   - Environment: the container's env (literal values and fieldRefs such as POD_NAMESPACE) plus
//     KUBERNETES_SERVICE_HOST/PORT pointing at the API server, which the kubelet derives from
//     the "kubernetes" Service (here the API server's own loopback address: there is no
//     kube-proxy and no endpoint reconciler).

// serviceAccountDir is where rest.InClusterConfig reads the pod's credentials.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// isCertdriftImage looks at the image's repository name only, like isEnvoyImage.
func isCertdriftImage(image string) bool {
	return strings.HasSuffix(imageRepoName(image), "certdrift")
}

// imageRepoName is the last path element of an image reference, without tag or digest.
func imageRepoName(image string) string {
	name := strings.ToLower(image)
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	name = name[strings.LastIndex(name, "/")+1:]
	if i := strings.Index(name, ":"); i >= 0 {
		name = name[:i]
	}
	return name
}

// certdriftArgs turns a container's command and args into certdrift's arguments: the image's
// entrypoint is certdrift and its default command is "serve" (Dockerfile).
func certdriftArgs(command, args []string) ([]string, error) {
	argv := append(slicesClone(command), args...)
	if len(command) > 0 {
		if filepath.Base(command[0]) != "certdrift" {
			return nil, fmt.Errorf("command %q is not certdrift: the testbed runs only certdrift itself in certdrift images", command[0])
		}
		argv = argv[1:]
	}
	if len(argv) == 0 {
		argv = []string{"serve"}
	}
	return argv, nil
}

// rewriteCertdriftArgs maps mount paths to the node and listen addresses to the pod's
// addresses, in "--flag=value" and "--flag value" forms alike.
func rewriteCertdriftArgs(argv []string, mounts mountTable, pn podNet) []string {
	out := make([]string, 0, len(argv))
	for _, a := range argv {
		if name, value, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "--") {
			out = append(out, name+"="+rewriteArgValue(value, mounts, pn))
			continue
		}
		out = append(out, rewriteArgValue(a, mounts, pn))
	}
	return out
}

func rewriteArgValue(v string, mounts mountTable, pn podNet) string {
	if s, ok := mounts.rewrite(v); ok {
		return s
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil || strings.HasPrefix(v, "--") {
		return v
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return v
	}
	return net.JoinHostPort(pn.rewriteAddress(host), port)
}

// apiServerHostPort splits the node's API server URL into what KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT carry.
func apiServerHostPort(raw string) (string, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("API server URL %q: %w", raw, err)
	}
	if u.Scheme != "https" || u.Hostname() == "" {
		return "", "", fmt.Errorf("API server URL %q: want https://host:port", raw)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return u.Hostname(), port, nil
}

// serviceAccountBind finds the volume mounted at serviceAccountDir, the one that must appear at
// that exact path; a pod with automountServiceAccountToken false has none.
func (c *container) serviceAccountBind() (string, error) {
	for _, vm := range c.spec.VolumeMounts {
		if strings.TrimSuffix(vm.MountPath, "/") == serviceAccountDir {
			if vm.SubPath != "" || vm.SubPathExpr != "" {
				return "", errors.New("a subPath mount at " + serviceAccountDir + " is not supported")
			}
			return c.w.volumeDir(vm.Name), nil
		}
	}
	return "", nil
}

// prepareCertdrift returns the binary, arguments and environment of a certdrift container.
func (c *container) prepareCertdrift() (string, []string, map[string]string, error) {
	bin := c.w.node.certdriftBinary
	if bin == "" {
		return "", nil, nil, fmt.Errorf("image %s is certdrift's, but the testbed was given no certdrift binary: set testbed.Options.CertdriftBinary (go build -o DIR/certdrift ./cmd/certdrift)", c.spec.Image)
	}
	argv, err := certdriftArgs(c.spec.Command, c.spec.Args)
	if err != nil {
		return "", nil, nil, err
	}
	for i := range argv {
		argv[i] = expandVars(argv[i], c.env)
	}
	mounts, err := c.mounts()
	if err != nil {
		return "", nil, nil, err
	}
	argv = rewriteCertdriftArgs(argv, mounts, c.podNet())
	env := make(map[string]string, len(c.env)+3)
	for k, v := range c.env {
		env[k] = v
	}
	host, port, err := apiServerHostPort(c.w.node.apiServer)
	if err != nil {
		return "", nil, nil, err
	}
	env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"] = host, port
	env["HOME"] = c.dir
	return bin, argv, env, nil
}
