package kube

import (
	"time"

	"github.com/certdrift/certdrift/ref"
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

// Key is "namespace/pod", the Envoy's name in reports.
func (t EnvoyTarget) Key() string { return t.Ref().String() }

// Ref is the pod as an Envoy reference.
func (t EnvoyTarget) Ref() ref.Envoy { return ref.Envoy{Namespace: t.Namespace, Pod: t.Pod} }

// Workload is the pod's owner; the zero Workload (String "") for a bare pod.
func (t EnvoyTarget) Workload() ref.Workload {
	if t.Owner.Kind == "" {
		return ref.Workload{}
	}
	return ref.Workload{Namespace: t.Namespace, Kind: t.Owner.Kind, Name: t.Owner.Name}
}

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
	Kind     ref.Kind // ref.Secret or ref.ConfigMap
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

// Limits on what one pod's annotations may declare (discovery enforces them; audit/bind
// bounds what it derives from the same facts by them).
const (
	MaxProbePorts  = 64
	MaxSNIsPerPort = 64
)
