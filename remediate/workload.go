package remediate

import (
	"encoding/json"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Workload is the owner of stale pods: what a cooldown, a record Lease, a rollout restart and
// the replicas − 1 floor apply to. Inside remediate a workload is always this type; the
// "Kind/name" strings of the audit (audit.PodContext.Workload, audit.Binding.Workload) are parsed
// once where they enter (ParseWorkload), and Ref and String make the strings of the output.
type Workload struct {
	Namespace string
	Kind      string
	Name      string
}

// ParseWorkload reads the audit's "Kind/name" of a workload in namespace; "" (a bare pod) is the
// zero Workload.
func ParseWorkload(namespace, ref string) Workload {
	if ref == "" {
		return Workload{}
	}
	kind, name, _ := strings.Cut(ref, "/")
	return Workload{Namespace: namespace, Kind: kind, Name: name}
}

// IsZero reports a pod without a workload (a bare pod, or an Envoy outside Kubernetes).
func (w Workload) IsZero() bool { return w.Kind == "" && w.Name == "" }

// Ref is "Kind/name", as the audit and the JSON output name a workload.
func (w Workload) Ref() string {
	if w.IsZero() {
		return ""
	}
	return w.Kind + "/" + w.Name
}

// String is "namespace/Kind/name": the workload's key in logs, cooldowns and Lease annotations.
func (w Workload) String() string {
	if w.IsZero() {
		return ""
	}
	return w.Namespace + "/" + w.Ref()
}

// MarshalJSON writes Ref: the JSON target names the namespace beside it, as it always has.
func (w Workload) MarshalJSON() ([]byte, error) { return json.Marshal(w.Ref()) }

// restartable: a rollout restart patches the pod template of these kinds only.
func (w Workload) restartable() bool {
	return w.Kind == "Deployment" || w.Kind == "DaemonSet" || w.Kind == "StatefulSet"
}

// objectRef is what an Event about the workload points at.
func (w Workload) objectRef() corev1.ObjectReference {
	return corev1.ObjectReference{Kind: w.Kind, APIVersion: "apps/v1", Namespace: w.Namespace, Name: w.Name}
}
