package audit

import (
	"path/filepath"
	"time"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/tlsprobe"
)

// Inputs is everything one audit judges: the three views plus the configuration that says how
// they relate. Gathering it is the caller's job (cmd/certdrift), so Run stays free of I/O.
type Inputs struct {
	Config  *config.Config
	Desired []desired.Observation
	Envoys  []EnvoyView
	// CertManager is what was read of cert-manager's Certificates and CertificateRequests
	// (Kubernetes mode); the zero value (local mode) judges nothing of cert-manager.
	CertManager kube.CertManager

	// Memo, when set, carries the clean verdicts on unchanged desired certificates from one Run
	// to the next (see Memo); the report is the same with or without it.
	Memo *Memo `json:"-"`
}

// EnvoyView is what was observed of one Envoy: its loaded view (admin) and served view
// (handshakes), keyed to its configuration entry.
type EnvoyView struct {
	Config config.Envoy
	// Admin is nil when no admin URL is configured.
	Admin  *envoystate.Snapshot
	Served []tlsprobe.Result
	// Pod is set in Kubernetes mode: the pod behind this Envoy, for the checks that need its
	// workload, start time and mounts. nil in local mode.
	Pod *PodContext
}

// PodContext is what the Kubernetes mode knows of the pod behind an EnvoyView. Its Namespace also
// scopes the audit's inferred bindings: a pod can mount only Secrets of its own namespace, so a
// certificate it serves is never inferred to be another namespace's Secret.
type PodContext struct {
	Namespace string
	Pod       string
	// Workload is the pod's owner ("Deployment/web", "DaemonSet/gw", "StatefulSet/db"), or "" for
	// a bare pod; replicas of one workload must serve the same leaf.
	Workload string
	// StartedAt is when the Envoy container's current process started (the pod's start time
	// when the container status does not say).
	StartedAt time.Time
	// NoHotReload is set for components declared as never reloading certificates
	// (annotation certdrift.dev/hot-reload: "false"): they are stale once the Secret changes
	// after they started (STALE_PROCESS), whatever their admin says.
	NoHotReload bool
	// Risks are Secret mounts that never receive updates (subPath).
	Risks []MountRisk
}

// MountRisk is a Secret mounted so that the container never sees its updates.
type MountRisk struct {
	Container string `json:"container"`
	MountPath string `json:"mount_path"`
	SubPath   string `json:"sub_path,omitempty"`
	// Source is the desired source name ("namespace/secret").
	Source string `json:"source"`
	Reason string `json:"reason"`
}

// Report is the outcome of one audit.
type Report struct {
	GeneratedAt time.Time `json:"generated_at"`
	Bindings    []Binding `json:"bindings"`
	Findings    []Finding `json:"findings"`
	Summary     Summary   `json:"summary"`
	// CertManager is each cert-manager Certificate joined to its Secret and the Envoys bound to
	// it (certmanager.go); empty when cert-manager was not read or is absent.
	CertManager []CertificateStatus `json:"cert_manager,omitempty"`
}

// Summary counts what was covered, so a clean report can be told apart from an empty one.
type Summary struct {
	DesiredSources int            `json:"desired_sources"`
	Envoys         int            `json:"envoys"`
	Handshakes     int            `json:"handshakes"`
	Bindings       int            `json:"bindings"`
	Findings       map[string]int `json:"findings_by_severity"`
	Coverage       Coverage       `json:"coverage"`
}

// Coverage says how much of what was found could be judged: "judged N of M bindings, K of L
// handshakes". A report is clean only when it is complete; a binding that could not be judged
// (state unknown), a handshake that returned no certificate, and an input that could not be read
// or parsed (UNREACHABLE, PARSE_ERROR, SOURCE_MISSING) each make it incomplete.
type Coverage struct {
	BindingsJudged   int `json:"bindings_judged"`
	Bindings         int `json:"bindings"`
	HandshakesJudged int `json:"handshakes_judged"`
	Handshakes       int `json:"handshakes"`
	// Gaps counts the findings that mark input not judged.
	Gaps     int  `json:"gaps"`
	Complete bool `json:"complete"`
}

// Binding ties one desired certificate to a place where an Envoy must load and serve it.
type Binding struct {
	Envoy  string `json:"envoy"`
	Source string `json:"source"`
	Item   string `json:"item,omitempty"`
	// Where the Envoy holds it: an SDS secret name and/or a certificate file path.
	Secret string `json:"secret,omitempty"`
	File   string `json:"file,omitempty"`
	// Workload is the Envoy pod's owner ("Deployment/web") in Kubernetes mode.
	Workload string `json:"workload,omitempty"`
	// Endpoint and SNIs at which it must be served, when known.
	Endpoint string   `json:"endpoint,omitempty"`
	SNIs     []string `json:"snis,omitempty"`
	// How the binding was established: "config", "path" (certificate path matches a desired file),
	// "sds-name", or "inferred" (same subject/SANs, different serial).
	Origin string `json:"origin"`
	// Trust is set for a trust binding: the desired CA bundle of Source against the validation
	// context the Envoy loaded from it (Secret and File then name the validation secret and the
	// CA file).
	Trust bool `json:"trust,omitempty"`
	// State is converged, converging, stale or unknown (see the State* constants).
	State string `json:"state"`
	// Reason says why a binding is unknown: which view was missing.
	Reason string `json:"reason,omitempty"`
}

// Inferred reports whether the binding is a heuristic match.
func (b Binding) Inferred() bool { return b.Origin == "inferred" }

// Loads reports whether a certificate secret of the Envoy's config_dump is where b is held: by
// its SDS name, or by the certificate file it reads (a secret whose certificate_chain is a
// filename that a binding by mount path names, under a name no binding knows). The audit judges
// the loaded view through it (loadedFor), and the collector labels loaded certificates with
// their source through it, so the two agree about which secret holds a binding.
func (b Binding) Loads(s envoystate.Secret) bool {
	return (b.Secret != "" && s.Name == b.Secret) ||
		(s.CertFile != "" && isFilePath(b.File) && filepath.Clean(s.CertFile) == filepath.Clean(b.File))
}
