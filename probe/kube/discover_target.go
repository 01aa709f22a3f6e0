package kube

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Preset names a way Envoy is deployed, which says where its admin listens.
type Preset string

// Presets (see the package doc for how pods are matched).
const (
	PresetEnvoy        Preset = "envoy"
	PresetIstio        Preset = "istio"
	PresetEnvoyGateway Preset = "envoy-gateway"
	// PresetAnnotated is a pod that only the certdrift.dev/envoy-admin-port annotation marks.
	PresetAnnotated Preset = "annotated"
	// PresetNoReload is a pod that is no Envoy but declares certdrift.dev/hot-reload: "false"
	// (Envoy Gateway's rate limit, say): it has no admin (AdminPort 0) and is audited from its
	// Secret mounts and start time alone (STALE_PROCESS). The annotation opts it in, so it is
	// matched whichever presets are enabled.
	PresetNoReload Preset = "no-reload"
)

// AllPresets are the presets enabled by default, in matching order.
var AllPresets = []Preset{PresetIstio, PresetEnvoyGateway, PresetEnvoy, PresetAnnotated}

// Annotations read from pods.
const (
	AnnotationAdminPort  = "certdrift.dev/envoy-admin-port"
	AnnotationProbePorts = "certdrift.dev/probe-ports"
	AnnotationSecrets    = "certdrift.dev/secrets"
	AnnotationPreset     = "certdrift.dev/preset"
	// AnnotationHotReload "false" declares a component that never reloads its certificates:
	// it is stale once a Secret it mounts changes after it started (STALE_PROCESS).
	AnnotationHotReload = "certdrift.dev/hot-reload"
)

// PresetSelectors are label selectors covering a preset's pods, for DiscoveryOptions.Selectors.
// Plain Envoys are recognised by image, which no label selector can express.
var PresetSelectors = map[Preset][]string{
	PresetIstio:        {"security.istio.io/tlsMode", "istio in (ingressgateway,egressgateway,eastwestgateway)", "gateway.istio.io/managed"},
	PresetEnvoyGateway: {"app.kubernetes.io/managed-by=envoy-gateway", "gateway.envoyproxy.io/owning-gateway-name"},
}

// presetDefaults is where each preset's Envoy listens.
var presetDefaults = map[Preset]struct {
	adminPort, statsPort int
	localhost            bool
	container            string
}{
	PresetEnvoy:        {adminPort: 9901},
	PresetIstio:        {adminPort: 15000, localhost: true, container: "istio-proxy"},
	PresetEnvoyGateway: {adminPort: 19000, statsPort: 19001, localhost: true, container: "envoy"},
	PresetAnnotated:    {},
	PresetNoReload:     {},
}

// EnvoyTarget is one Envoy pod as discovery sees it: where to reach its admin and TLS ports,
// which Secrets it declares, and the parts of its spec that bind files to Secrets.
type EnvoyTarget struct {
	Namespace string
	Pod       string
	UID       string
	PodIP     string
	Node      string
	Owner     Owner
	// StartTime is when the kubelet accepted the pod (status.startTime).
	StartTime time.Time
	// Terminating is set once the pod has a deletion timestamp: it may still serve.
	Terminating bool
	Preset      Preset
	// EnvoyContainer is the container running Envoy ("" when none could be told apart).
	EnvoyContainer string
	Containers     []ContainerInfo

	AdminPort int
	// AdminLocalhostOnly: the admin listens on the pod's loopback, reachable only by
	// port-forward.
	AdminLocalhostOnly bool
	// StatsPort is a separate Prometheus stats listener on the pod IP (Envoy Gateway's 19001), 0
	// when none.
	StatsPort  int
	ProbePorts []ProbePort
	// ContainerPorts are the TCP ports the Envoy container declares (every container's when the
	// Envoy container is unknown): where TLS handshakes go when neither the annotation nor the
	// admin's listeners say (SpecEndpoints).
	ContainerPorts []ContainerPort `json:",omitempty"`
	// NoHotReload: annotation certdrift.dev/hot-reload is "false".
	NoHotReload bool
	// DeclaredSecrets are "namespace/name" references from certdrift.dev/secrets.
	DeclaredSecrets []string
	// AnnotationErrors name certdrift.dev annotations that could not be read.
	AnnotationErrors []string

	Volumes []PodVolume   // only volumes with Secret or ConfigMap sources
	Mounts  []VolumeMount // mounts of those volumes, all containers
}

// Key is "namespace/pod".
func (t EnvoyTarget) Key() string { return t.Namespace + "/" + t.Pod }

// Owner is the workload a pod belongs to: Deployment (through its ReplicaSet), DaemonSet,
// StatefulSet, or the direct owner of another kind; empty for a bare pod.
type Owner struct {
	Kind string
	Name string
	// Inferred: the ReplicaSet could not be read, so the Deployment name comes from the
	// ReplicaSet's name and the pod-template-hash label.
	Inferred bool `json:",omitempty"`
}

// ContainerInfo is one container (or native sidecar) with its status.
type ContainerInfo struct {
	Name         string
	Image        string
	RestartCount int32
	// StartedAt is when the current instance started; zero when not running.
	StartedAt time.Time
	Ready     bool
}

// ProbePort is a TLS port to handshake with, and the SNIs to send (none: decided later).
type ProbePort struct {
	Port int
	SNIs []string `json:",omitempty"`
}

// ContainerPort is one declared TCP container port.
type ContainerPort struct {
	Name string `json:",omitempty"`
	Port int
}

// PodVolume is a volume whose files come from Secrets or ConfigMaps.
type PodVolume struct {
	Name    string
	Sources []VolumeSource
	// Token: the volume also projects a service account token — the kube-api-access-* volume
	// that admission adds to every container. Its ca.crt (the kube-root-ca.crt ConfigMap) is
	// the API server's CA, for clients of the API server: it binds only when Envoy reports
	// reading it, never from the spec alone.
	Token bool `json:",omitempty"`
}

// VolumeSource is a secret or configMap volume, or one source of a projected volume.
type VolumeSource struct {
	Kind     string // "Secret" or "ConfigMap"
	Name     string
	Items    []KeyPath `json:",omitempty"` // empty: every key, as a file of its name
	Optional bool      `json:",omitempty"`
}

// KeyPath maps a key of the Secret or ConfigMap to a file path in the volume.
type KeyPath struct{ Key, Path string }

// VolumeMount is one mount of a PodVolume into a container. A SubPath mount is a copy made at
// container start that never updates.
type VolumeMount struct {
	Container   string
	Volume      string
	MountPath   string
	SubPath     string `json:",omitempty"`
	SubPathExpr string `json:",omitempty"`
}

// Limits on what one pod's annotations may declare.
const (
	MaxProbePorts      = 64
	MaxSNIsPerPort     = 64
	maxDeclaredSecrets = 256
	maxAnnotationLen   = 16 << 10
)

// targetFor returns the EnvoyTarget of a pod, or nil when the pod is not an Envoy of an enabled
// preset.
func targetFor(p *corev1.Pod, enabled map[Preset]bool) *EnvoyTarget {
	preset, container, ok := matchPreset(p, enabled)
	if !ok {
		return nil
	}
	d := presetDefaults[preset]
	t := &EnvoyTarget{
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
	if v, ok := a[AnnotationAdminPort]; ok {
		port, local, err := parseAdminPort(v)
		if err != nil {
			t.AnnotationErrors = append(t.AnnotationErrors, fmt.Sprintf("%s: %v", AnnotationAdminPort, err))
		} else {
			t.AdminPort, t.AdminLocalhostOnly = port, local
		}
	}
	if v, ok := a[AnnotationProbePorts]; ok {
		ports, err := parseProbePorts(v)
		if err != nil {
			t.AnnotationErrors = append(t.AnnotationErrors, fmt.Sprintf("%s: %v", AnnotationProbePorts, err))
		}
		t.ProbePorts = ports
	}
	if v, ok := a[AnnotationSecrets]; ok {
		refs, err := parseSecretRefs(v, p.Namespace)
		if err != nil {
			t.AnnotationErrors = append(t.AnnotationErrors, fmt.Sprintf("%s: %v", AnnotationSecrets, err))
		}
		t.DeclaredSecrets = refs
	}
	if v, ok := a[AnnotationHotReload]; ok {
		hot, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			t.AnnotationErrors = append(t.AnnotationErrors, fmt.Sprintf("%s: %q is not true or false", AnnotationHotReload, preview(v)))
		}
		t.NoHotReload = err == nil && !hot
	}
	if t.AdminPort == 0 && len(t.AnnotationErrors) == 0 && preset != PresetNoReload {
		// Only reachable for PresetAnnotated forced by certdrift.dev/preset without a port.
		t.AnnotationErrors = append(t.AnnotationErrors, fmt.Sprintf("%s: missing; preset %s has no default admin port", AnnotationAdminPort, preset))
	}
	t.Volumes, t.Mounts = secretVolumes(p)
	t.ContainerPorts = containerPorts(p, container)
	return t
}

// containerPorts are the TCP ports of the named container, of every container when name is "".
func containerPorts(p *corev1.Pod, name string) []ContainerPort {
	var out []ContainerPort
	for _, c := range allContainers(p) {
		if name != "" && c.Name != name {
			continue
		}
		for _, cp := range c.Ports {
			if cp.Protocol != "" && cp.Protocol != corev1.ProtocolTCP {
				continue
			}
			if cp.ContainerPort < 1 || cp.ContainerPort > 65535 || len(out) == MaxProbePorts {
				continue
			}
			out = append(out, ContainerPort{Name: cp.Name, Port: int(cp.ContainerPort)})
		}
	}
	return out
}

// matchPreset decides whether a pod is an Envoy and which container runs it.
func matchPreset(p *corev1.Pod, enabled map[Preset]bool) (Preset, string, bool) {
	if forced, ok := p.Annotations[AnnotationPreset]; ok {
		forced = strings.TrimSpace(forced)
		if forced == "none" {
			return "", "", false
		}
		if _, known := presetDefaults[Preset(forced)]; known {
			return Preset(forced), envoyContainer(p, presetDefaults[Preset(forced)].container), true
		}
		// An unknown value falls through to matching: the pod is still found, and the
		// mistake shows as the preset it gets.
	}
	l := p.Labels
	if enabled[PresetIstio] {
		if _, ok := findContainer(p, "istio-proxy"); ok {
			return PresetIstio, "istio-proxy", true
		}
		switch l["istio"] {
		case "ingressgateway", "egressgateway", "eastwestgateway":
			return PresetIstio, envoyContainer(p, "istio-proxy"), true
		}
		if _, ok := l["gateway.istio.io/managed"]; ok {
			return PresetIstio, envoyContainer(p, "istio-proxy"), true
		}
	}
	if enabled[PresetEnvoyGateway] {
		_, owned := l["gateway.envoyproxy.io/owning-gateway-name"]
		if owned || l["app.kubernetes.io/managed-by"] == "envoy-gateway" {
			return PresetEnvoyGateway, envoyContainer(p, "envoy"), true
		}
	}
	if enabled[PresetEnvoy] {
		if name := firstEnvoyImage(p); name != "" {
			return PresetEnvoy, name, true
		}
	}
	if enabled[PresetAnnotated] {
		if _, ok := p.Annotations[AnnotationAdminPort]; ok {
			return PresetAnnotated, envoyContainer(p, ""), true
		}
	}
	if hot, err := strconv.ParseBool(strings.TrimSpace(p.Annotations[AnnotationHotReload])); err == nil && !hot {
		// The only container, if one: its start time is the process's.
		return PresetNoReload, envoyContainer(p, ""), true
	}
	return "", "", false
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
func directOwner(p *corev1.Pod) Owner {
	for _, r := range p.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return Owner{Kind: r.Kind, Name: r.Name}
		}
	}
	return Owner{}
}

func containerInfos(p *corev1.Pod) []ContainerInfo {
	status := map[string]corev1.ContainerStatus{}
	for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.ContainerStatuses...), p.Status.InitContainerStatuses...) {
		status[s.Name] = s
	}
	var out []ContainerInfo
	for _, c := range allContainers(p) {
		ci := ContainerInfo{Name: c.Name, Image: c.Image}
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
func secretVolumes(p *corev1.Pod) ([]PodVolume, []VolumeMount) {
	var vols []PodVolume
	keep := map[string]bool{}
	for _, v := range p.Spec.Volumes {
		var srcs []VolumeSource
		token := false
		switch {
		case v.Secret != nil:
			srcs = append(srcs, VolumeSource{Kind: "Secret", Name: v.Secret.SecretName, Items: keyPaths(v.Secret.Items), Optional: isTrue(v.Secret.Optional)})
		case v.ConfigMap != nil:
			srcs = append(srcs, VolumeSource{Kind: "ConfigMap", Name: v.ConfigMap.Name, Items: keyPaths(v.ConfigMap.Items), Optional: isTrue(v.ConfigMap.Optional)})
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.ServiceAccountToken != nil:
					token = true
				case s.Secret != nil:
					srcs = append(srcs, VolumeSource{Kind: "Secret", Name: s.Secret.Name, Items: keyPaths(s.Secret.Items), Optional: isTrue(s.Secret.Optional)})
				case s.ConfigMap != nil:
					srcs = append(srcs, VolumeSource{Kind: "ConfigMap", Name: s.ConfigMap.Name, Items: keyPaths(s.ConfigMap.Items), Optional: isTrue(s.ConfigMap.Optional)})
				}
			}
		}
		if len(srcs) > 0 {
			vols = append(vols, PodVolume{Name: v.Name, Sources: srcs, Token: token})
			keep[v.Name] = true
		}
	}
	var mounts []VolumeMount
	for _, c := range allContainers(p) {
		for _, m := range c.VolumeMounts {
			if keep[m.Name] {
				mounts = append(mounts, VolumeMount{Container: c.Name, Volume: m.Name, MountPath: m.MountPath, SubPath: m.SubPath, SubPathExpr: m.SubPathExpr})
			}
		}
	}
	return vols, mounts
}

func keyPaths(items []corev1.KeyToPath) []KeyPath {
	var out []KeyPath
	for _, i := range items {
		out = append(out, KeyPath{Key: i.Key, Path: i.Path})
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
func parseProbePorts(v string) ([]ProbePort, error) {
	if len(v) > maxAnnotationLen {
		return nil, fmt.Errorf("longer than %d bytes", maxAnnotationLen)
	}
	var (
		out  []ProbePort
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
		pp := ProbePort{Port: port}
		if hasSNIs {
			for _, sni := range strings.Split(snis, "|") {
				sni = strings.TrimSpace(sni)
				if msgs := validation.IsDNS1123Subdomain(strings.TrimPrefix(sni, "*.")); len(msgs) > 0 {
					errs = append(errs, fmt.Sprintf("port %d: SNI %q is not a DNS name", port, preview(sni)))
					continue
				}
				pp.SNIs = append(pp.SNIs, sni)
			}
			if len(pp.SNIs) > MaxSNIsPerPort {
				errs = append(errs, fmt.Sprintf("port %d: more than %d SNIs", port, MaxSNIsPerPort))
				pp.SNIs = pp.SNIs[:MaxSNIsPerPort]
			}
		}
		if len(out) == MaxProbePorts {
			errs = append(errs, fmt.Sprintf("more than %d ports", MaxProbePorts))
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
		ns, name, hasNS := SplitRef(ref)
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
