package remediate

import (
	"slices"

	"github.com/certdrift/certdrift/audit"
)

// The finding codes repair acts on, in one place: the planner, `audit --reload` and
// `serve --remediate` all ask here.

// DriftCodes prove an Envoy stale past the grace period (the audit emits them only then): the
// only findings repair acts on. REPLICA_DIVERGENCE counts only when it names a pod.
var DriftCodes = []audit.Code{audit.StaleServed, audit.StaleLoaded, audit.StaleProcess, audit.ReplicaDivergence}

// IsDrift reports whether c is one of DriftCodes.
func IsDrift(c audit.Code) bool { return slices.Contains(DriftCodes, c) }

// StaleEnvoys are the Envoys (Kubernetes: "namespace/pod") that a drift finding names, each once,
// in the report's order: the only Envoys repair may act on.
func StaleEnvoys(r audit.Report) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Subject.Envoy != "" && IsDrift(f.Code) && !slices.Contains(out, f.Subject.Envoy) {
			out = append(out, f.Subject.Envoy)
		}
	}
	return out
}

// badSecretCodes say the desired certificate itself is wrong: an Envoy restarted onto it would
// refuse it or serve something broken, so a restart cannot fix the drift.
var badSecretCodes = map[audit.Code]bool{
	audit.KeyMismatch: true, audit.RotationFailed: true, audit.ParseError: true,
	audit.NotYetValid: true,
}

// notConvergedCodes fail a post-check: the replacement is itself stale or unreachable, its
// rotation failed, or it serves something other than it loaded. REPLICA_DIVERGENCE is not among
// them: the replacement of one pod diverges from its still stale siblings until they are
// replaced too.
var notConvergedCodes = []audit.Code{audit.StaleServed, audit.StaleLoaded, audit.StaleProcess, audit.Unreachable,
	audit.RotationFailed, audit.LoadedServedMismatch}
