package discovery

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/certdrift/certdrift/probe/kube"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// PresetSelectors are label selectors covering a preset's pods, for Options.Selectors.
// Plain Envoys are recognised by image, which no label selector can express.
var PresetSelectors = map[kube.Preset][]string{
	kube.PresetIstio:        {"security.istio.io/tlsMode", "istio in (ingressgateway,egressgateway,eastwestgateway)", "gateway.istio.io/managed"},
	kube.PresetEnvoyGateway: {"app.kubernetes.io/managed-by=envoy-gateway", "gateway.envoyproxy.io/owning-gateway-name"},
}

// presetDefaults is where each preset's Envoy listens.
var presetDefaults = map[kube.Preset]struct {
	adminPort, statsPort int
	localhost            bool
	container            string
}{
	kube.PresetEnvoy:        {adminPort: 9901},
	kube.PresetIstio:        {adminPort: 15000, localhost: true, container: "istio-proxy"},
	kube.PresetEnvoyGateway: {adminPort: 19000, statsPort: 19001, localhost: true, container: "envoy"},
	kube.PresetAnnotated:    {},
	kube.PresetNoReload:     {},
}

// Limits on what one pod's annotations may declare, beyond kube.MaxProbePorts and
// kube.MaxSNIsPerPort.
const (
	maxDeclaredSecrets = 256
	maxAnnotationLen   = 16 << 10
)

// targetFor returns the EnvoyTarget of a pod, or nil when the pod is not an Envoy of an enabled
// preset.
func targetFor(p *corev1.Pod, enabled map[kube.Preset]bool) *kube.EnvoyTarget {
	preset, container, ok := matchPreset(p, enabled)
	if !ok {
		return nil
	}
	d := presetDefaults[preset]
	t := &kube.EnvoyTarget{
		Namespace:          p.Namespace,
		Pod:                p.Name,
		UID:                string(p.UID),
		PodIP:              p.Status.PodIP,
		Node:               p.Spec.NodeName,
		Owner:              directOwner(p),
		Terminating:        p.DeletionTimestamp != nil,
		Preset:             preset,
		EnvoyContainer:     container,
		AdminPort:          d.adminPort,
		AdminLocalhostOnly: d.localhost,
		StatsPort:          d.statsPort,
		Containers:         containerInfos(p),
	}
	if p.Status.StartTime != nil {
		t.StartTime = p.Status.StartTime.UTC()
	}
	a := p.Annotations
	if v, ok := a[kube.AnnotationAdminPort]; ok {
		port, local, err := parseAdminPort(v)
		if err != nil {
			t.AnnotationErrors = append(t.AnnotationErrors, fmt.Sprintf("%s: %v", kube.AnnotationAdminPort, err))
		} else {
			t.AdminPort, t.AdminLocalhostOnly = port, local
		}
	}
	if v, ok := a[kube.AnnotationProbePorts]; ok {
		ports, err := parseProbePorts(v)
		if err != nil {
			t.AnnotationErrors = append(t.AnnotationErrors, fmt.Sprintf("%s: %v", kube.AnnotationProbePorts, err))
		}
		t.ProbePorts = ports
	}
	if v, ok := a[kube.AnnotationSecrets]; ok {
		refs, err := parseSecretRefs(v, p.Namespace)
		if err != nil {
			t.AnnotationErrors = append(t.AnnotationErrors, fmt.Sprintf("%s: %v", kube.AnnotationSecrets, err))
		}
		t.DeclaredSecrets = refs
	}
	// Envoy Gateway's rate limit loads its certificates once, at start (the envoy-rate-limit
	// Secret at /certs): it needs no annotation to be judged as such; the annotation can still
	// say otherwise.
	t.NoHotReload = preset == kube.PresetNoReload && isEnvoyGatewayRateLimit(p)
	if v, ok := a[kube.AnnotationHotReload]; ok {
		hot, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			t.AnnotationErrors = append(t.AnnotationErrors, fmt.Sprintf("%s: %q is not true or false", kube.AnnotationHotReload, preview(v)))
		}
		t.NoHotReload = err == nil && !hot
	}
	if t.AdminPort == 0 && len(t.AnnotationErrors) == 0 && preset != kube.PresetNoReload {
		// Only reachable for PresetAnnotated forced by certdrift.dev/preset without a port.
		t.AnnotationErrors = append(t.AnnotationErrors, fmt.Sprintf("%s: missing; preset %s has no default admin port", kube.AnnotationAdminPort, preset))
	}
	t.Volumes, t.Mounts = secretVolumes(p)
	t.ContainerPorts = containerPorts(p, container)
	return t
}

// containerPorts are the TCP ports of the named container, of every container when name is "".
func containerPorts(p *corev1.Pod, name string) []kube.ContainerPort {
	var out []kube.ContainerPort
	for _, c := range allContainers(p) {
		if name != "" && c.Name != name {
			continue
		}
		for _, cp := range c.Ports {
			if cp.Protocol != "" && cp.Protocol != corev1.ProtocolTCP {
				continue
			}
			if cp.ContainerPort < 1 || cp.ContainerPort > 65535 || len(out) == kube.MaxProbePorts {
				continue
			}
			out = append(out, kube.ContainerPort{Name: cp.Name, Port: int(cp.ContainerPort)})
		}
	}
	return out
}

// matchPreset decides whether a pod is an Envoy and which container runs it.
func matchPreset(p *corev1.Pod, enabled map[kube.Preset]bool) (kube.Preset, string, bool) {
	if forced, ok := p.Annotations[kube.AnnotationPreset]; ok {
		forced = strings.TrimSpace(forced)
		if forced == "none" {
			return "", "", false
		}
		if _, known := presetDefaults[kube.Preset(forced)]; known {
			return kube.Preset(forced), envoyContainer(p, presetDefaults[kube.Preset(forced)].container), true
		}
		// An unknown value falls through to matching: the pod is still found, and the
		// mistake shows as the preset it gets.
	}
	l := p.Labels
	if enabled[kube.PresetIstio] {
		if _, ok := findContainer(p, "istio-proxy"); ok {
			return kube.PresetIstio, "istio-proxy", true
		}
		switch l["istio"] {
		case "ingressgateway", "egressgateway", "eastwestgateway":
			return kube.PresetIstio, envoyContainer(p, "istio-proxy"), true
		}
		if _, ok := l["gateway.istio.io/managed"]; ok {
			return kube.PresetIstio, envoyContainer(p, "istio-proxy"), true
		}
	}
	if enabled[kube.PresetEnvoyGateway] {
		if isEnvoyGatewayRateLimit(p) {
			return kube.PresetNoReload, envoyContainer(p, "envoy-ratelimit"), true
		}
		_, owned := l["gateway.envoyproxy.io/owning-gateway-name"]
		if owned || l["app.kubernetes.io/managed-by"] == "envoy-gateway" {
			return kube.PresetEnvoyGateway, envoyContainer(p, "envoy"), true
		}
	}
	if enabled[kube.PresetEnvoy] {
		if name := firstEnvoyImage(p); name != "" {
			return kube.PresetEnvoy, name, true
		}
	}
	if enabled[kube.PresetAnnotated] {
		if _, ok := p.Annotations[kube.AnnotationAdminPort]; ok {
			return kube.PresetAnnotated, envoyContainer(p, ""), true
		}
	}
	if hot, err := strconv.ParseBool(strings.TrimSpace(p.Annotations[kube.AnnotationHotReload])); err == nil && !hot {
		// The only container, if one: its start time is the process's.
		return kube.PresetNoReload, envoyContainer(p, ""), true
	}
	return "", "", false
}

// isEnvoyGatewayRateLimit recognises the rate limit Deployment's pods Envoy Gateway creates when
// global rate limiting is on, by the labels it gives them (app.kubernetes.io/managed-by
// envoy-gateway, app.kubernetes.io/component ratelimit) and by running no Envoy: the rate limit
// service (image envoyproxy/ratelimit), which has no Envoy admin and never reloads its
// certificates.
func isEnvoyGatewayRateLimit(p *corev1.Pod) bool {
	l := p.Labels
	return l["app.kubernetes.io/managed-by"] == "envoy-gateway" && l["app.kubernetes.io/component"] == "ratelimit" &&
		firstEnvoyImage(p) == ""
}

// allContainers lists regular containers and native sidecars (init containers that keep
// running), which is how Istio injects istio-proxy since 1.19 when asked.
func allContainers(p *corev1.Pod) []corev1.Container {
	out := append([]corev1.Container(nil), p.Spec.Containers...)
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return out
}

func findContainer(p *corev1.Pod, name string) (corev1.Container, bool) {
	for _, c := range allContainers(p) {
		if c.Name == name {
			return c, true
		}
	}
	return corev1.Container{}, false
}

// envoyContainer is the preferred container if present, else the first with an Envoy image,
// else the only container, else "".
func envoyContainer(p *corev1.Pod, preferred string) string {
	if preferred != "" {
		if _, ok := findContainer(p, preferred); ok {
			return preferred
		}
	}
	if name := firstEnvoyImage(p); name != "" {
		return name
	}
	if cs := allContainers(p); len(cs) == 1 {
		return cs[0].Name
	}
	return ""
}

func firstEnvoyImage(p *corev1.Pod) string {
	for _, c := range allContainers(p) {
		if isEnvoyImage(c.Image) {
			return c.Name
		}
	}
	return ""
}

// isEnvoyImage looks at the last path element of the image repository: "envoyproxy/envoy:v1",
// "envoyproxy/envoy-distroless", "mirror.local/proxies/envoy@sha256:…". Istio's proxyv2 is
// matched by the istio preset, Envoy Gateway's proxies by their labels.
func isEnvoyImage(image string) bool {
	repo := strings.ToLower(image)
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	last := repo[strings.LastIndexByte(repo, '/')+1:]
	if i := strings.IndexByte(last, ':'); i >= 0 {
		last = last[:i]
	}
	return strings.Contains(last, "envoy")
}

// directOwner is the pod's controller reference (a ReplicaSet is resolved later).
func directOwner(p *corev1.Pod) kube.Owner {
	for _, r := range p.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return kube.Owner{Kind: r.Kind, Name: r.Name}
		}
	}
	return kube.Owner{}
}

func containerInfos(p *corev1.Pod) []kube.ContainerInfo {
	status := map[string]corev1.ContainerStatus{}
	for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.ContainerStatuses...), p.Status.InitContainerStatuses...) {
		status[s.Name] = s
	}
	var out []kube.ContainerInfo
	for _, c := range allContainers(p) {
		ci := kube.ContainerInfo{Name: c.Name, Image: c.Image}
		if s, ok := status[c.Name]; ok {
			ci.RestartCount, ci.Ready = s.RestartCount, s.Ready
			if s.State.Running != nil {
				ci.StartedAt = s.State.Running.StartedAt.UTC()
			}
		}
		out = append(out, ci)
	}
	return out
}

// secretVolumes keeps the volumes fed by Secrets or ConfigMaps and their mounts.
func secretVolumes(p *corev1.Pod) ([]kube.PodVolume, []kube.VolumeMount) {
	var vols []kube.PodVolume
	keep := map[string]bool{}
	for _, v := range p.Spec.Volumes {
		var srcs []kube.VolumeSource
		token := false
		switch {
		case v.Secret != nil:
			srcs = append(srcs, kube.VolumeSource{Kind: "Secret", Name: v.Secret.SecretName, Items: keyPaths(v.Secret.Items), Optional: isTrue(v.Secret.Optional)})
		case v.ConfigMap != nil:
			srcs = append(srcs, kube.VolumeSource{Kind: "ConfigMap", Name: v.ConfigMap.Name, Items: keyPaths(v.ConfigMap.Items), Optional: isTrue(v.ConfigMap.Optional)})
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.ServiceAccountToken != nil:
					token = true
				case s.Secret != nil:
					srcs = append(srcs, kube.VolumeSource{Kind: "Secret", Name: s.Secret.Name, Items: keyPaths(s.Secret.Items), Optional: isTrue(s.Secret.Optional)})
				case s.ConfigMap != nil:
					srcs = append(srcs, kube.VolumeSource{Kind: "ConfigMap", Name: s.ConfigMap.Name, Items: keyPaths(s.ConfigMap.Items), Optional: isTrue(s.ConfigMap.Optional)})
				}
			}
		}
		if len(srcs) > 0 {
			vols = append(vols, kube.PodVolume{Name: v.Name, Sources: srcs, Token: token})
			keep[v.Name] = true
		}
	}
	var mounts []kube.VolumeMount
	for _, c := range allContainers(p) {
		for _, m := range c.VolumeMounts {
			if keep[m.Name] {
				mounts = append(mounts, kube.VolumeMount{Container: c.Name, Volume: m.Name, MountPath: m.MountPath, SubPath: m.SubPath, SubPathExpr: m.SubPathExpr})
			}
		}
	}
	return vols, mounts
}

func keyPaths(items []corev1.KeyToPath) []kube.KeyPath {
	var out []kube.KeyPath
	for _, i := range items {
		out = append(out, kube.KeyPath{Key: i.Key, Path: i.Path})
	}
	return out
}

func isTrue(b *bool) bool { return b != nil && *b }

// parseAdminPort reads "9901", "localhost:15000" or "127.0.0.1:15000".
func parseAdminPort(v string) (port int, localhostOnly bool, err error) {
	v = strings.TrimSpace(v)
	if host, p, ok := strings.Cut(v, ":"); ok {
		if host != "localhost" && host != "127.0.0.1" {
			return 0, false, fmt.Errorf("%q: host must be localhost or 127.0.0.1 (the pod IP is the default)", preview(v))
		}
		v, localhostOnly = p, true
	}
	port, err = parsePort(v)
	return port, localhostOnly, err
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port number (1-65535)", preview(s))
	}
	return n, nil
}

// parseProbePorts reads "8443, 9443/a.example|b.example". It keeps the entries it could read.
func parseProbePorts(v string) ([]kube.ProbePort, error) {
	if len(v) > maxAnnotationLen {
		return nil, fmt.Errorf("longer than %d bytes", maxAnnotationLen)
	}
	var (
		out  []kube.ProbePort
		errs []string
		seen = map[int]bool{}
	)
	for _, entry := range strings.Split(v, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		portText, snis, hasSNIs := strings.Cut(entry, "/")
		port, err := parsePort(portText)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if seen[port] {
			errs = append(errs, fmt.Sprintf("port %d listed twice", port))
			continue
		}
		pp := kube.ProbePort{Port: port}
		if hasSNIs {
			for _, sni := range strings.Split(snis, "|") {
				sni = strings.TrimSpace(sni)
				if msgs := validation.IsDNS1123Subdomain(strings.TrimPrefix(sni, "*.")); len(msgs) > 0 {
					errs = append(errs, fmt.Sprintf("port %d: SNI %q is not a DNS name", port, preview(sni)))
					continue
				}
				pp.SNIs = append(pp.SNIs, sni)
			}
			if len(pp.SNIs) > kube.MaxSNIsPerPort {
				errs = append(errs, fmt.Sprintf("port %d: more than %d SNIs", port, kube.MaxSNIsPerPort))
				pp.SNIs = pp.SNIs[:kube.MaxSNIsPerPort]
			}
		}
		if len(out) == kube.MaxProbePorts {
			errs = append(errs, fmt.Sprintf("more than %d ports", kube.MaxProbePorts))
			break
		}
		seen[port] = true
		out = append(out, pp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// parseSecretRefs reads "name, ns/name" into sorted, unique "ns/name" references.
func parseSecretRefs(v, podNS string) ([]string, error) {
	if len(v) > maxAnnotationLen {
		return nil, fmt.Errorf("longer than %d bytes", maxAnnotationLen)
	}
	var (
		out  []string
		errs []string
		seen = map[string]bool{}
	)
	for _, ref := range strings.Split(v, ",") {
		ref = strings.TrimSpace(ref)
		if ref == "" {
			continue
		}
		ns, name, hasNS := kube.SplitRef(ref)
		if !hasNS {
			ns = podNS
		}
		if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			errs = append(errs, fmt.Sprintf("%q is not a Secret name or namespace/name", preview(ref)))
			continue
		}
		if k := ns + "/" + name; !seen[k] {
			if len(out) == maxDeclaredSecrets {
				errs = append(errs, fmt.Sprintf("more than %d Secrets", maxDeclaredSecrets))
				break
			}
			seen[k] = true
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// preview shortens hostile text quoted in an error.
func preview(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
