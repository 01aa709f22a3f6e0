// Package ref names the things certdrift observes and reports on — desired sources, Envoys and
// workloads — as small typed references, instead of prefixed strings parsed where they are used.
//
// Each has String, the exact text certdrift has always printed for it (in JSON reports, metric
// labels and configuration files, which are APIs), and a Parse for that text. It links nothing
// but the standard library, so that every package can import it.
package ref

import "strings"

// Kind is the kind of a desired source.
type Kind string

// Kinds of desired sources.
const (
	Secret    Kind = "Secret"
	ConfigMap Kind = "ConfigMap"
	// File is a local file or directory source, named as the configuration names it.
	File Kind = "File"
)

// configMapPrefix marks a ConfigMap's source name; a Secret's has none.
const configMapPrefix = "configmap:"

// Source is a desired source: a Secret or ConfigMap (Kubernetes mode), or a local source.
type Source struct {
	Kind      Kind
	Namespace string // "" for File
	Name      string
}

// String is the source's name in reports, labels and configuration: "namespace/name" for a
// Secret (the form Envoy Gateway uses for SDS secret names, and Istio's kubernetes://ns/name
// without its scheme), "configmap:namespace/name" for a ConfigMap, the configured name for a
// local source.
func (s Source) String() string {
	switch s.Kind {
	case ConfigMap:
		return configMapPrefix + s.Namespace + "/" + s.Name
	case File:
		return s.Name
	}
	return s.Namespace + "/" + s.Name
}

// Key is "namespace/name" for a Secret or ConfigMap (the object's key, whatever its kind), the
// name for a local source.
func (s Source) Key() string {
	if s.Kind == File {
		return s.Name
	}
	return s.Namespace + "/" + s.Name
}

// Valid reports whether a Secret or ConfigMap reference can name an object: a DNS label
// namespace and a DNS subdomain name. A local source is valid when it has a name.
func (s Source) Valid() bool {
	if s.Kind == File {
		return s.Name != ""
	}
	return (s.Kind == Secret || s.Kind == ConfigMap) && IsDNSLabel(s.Namespace) && IsDNSSubdomain(s.Name)
}

// ParseKube reads a Kubernetes-mode source name ("namespace/name" for a Secret,
// "configmap:namespace/name" for a ConfigMap); false when s has not that shape (a namespace and a
// name, neither empty, the name without '/'). It does not check that the names are valid
// Kubernetes names: see Valid.
func ParseKube(s string) (Source, bool) {
	kind := Secret
	if rest, ok := strings.CutPrefix(s, configMapPrefix); ok {
		kind, s = ConfigMap, rest
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return Source{}, false
	}
	return Source{Kind: kind, Namespace: ns, Name: name}, true
}

// SourceKey is Key for a source given by its String: the name without the ConfigMap prefix. For
// code that still carries source names as strings (the exposition's per-source series).
func SourceKey(name string) string { return strings.TrimPrefix(name, configMapPrefix) }

// Envoy is one Envoy pod in Kubernetes mode.
type Envoy struct {
	Namespace, Pod string
}

// String is "namespace/pod", the Envoy's name in reports and labels.
func (e Envoy) String() string { return e.Namespace + "/" + e.Pod }

// ParseEnvoy reads "namespace/pod"; false when s has not that shape.
func ParseEnvoy(s string) (Envoy, bool) {
	ns, pod, ok := strings.Cut(s, "/")
	if !ok || ns == "" || pod == "" || strings.Contains(pod, "/") {
		return Envoy{}, false
	}
	return Envoy{Namespace: ns, Pod: pod}, true
}

// Workload is the owner of Envoy pods: a Deployment (through its ReplicaSet), DaemonSet,
// StatefulSet, or the direct owner of another kind.
type Workload struct {
	Namespace, Kind, Name string
}

// String is "Kind/name", as reports and labels show the workload (the namespace is beside it).
// The zero Workload (a bare pod) is "".
func (w Workload) String() string {
	if w.Kind == "" {
		return ""
	}
	return w.Kind + "/" + w.Name
}

// ParseWorkload reads "Kind/name" of a workload in namespace ns; false when s has not that
// shape.
func ParseWorkload(ns, s string) (Workload, bool) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok || kind == "" || name == "" || strings.Contains(name, "/") {
		return Workload{}, false
	}
	return Workload{Namespace: ns, Kind: kind, Name: name}, true
}

// IsDNSLabel reports whether s is an RFC 1123 label: 1 to 63 lower-case letters, digits and '-',
// starting and ending with a letter or digit (a namespace name). Written here rather than taken
// from apimachinery's validation package so that this package links no Kubernetes code
// (TestDNSNamesMatchAPIMachinery keeps the two in step).
func IsDNSLabel(s string) bool { return len(s) <= 63 && labelChars(s) }

// IsDNSSubdomain reports whether s is an RFC 1123 subdomain: at most 253 characters, labels
// separated by dots (a Secret or ConfigMap name). As in apimachinery, one label of a subdomain is
// not limited to 63 characters.
func IsDNSSubdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !labelChars(label) {
			return false
		}
	}
	return true
}

// labelChars reports whether s is non-empty, of lower-case letters, digits and '-', and starts
// and ends with a letter or digit.
func labelChars(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}
