package inventory

import (
	"time"

	"github.com/certdrift/certdrift/probe/kube"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// entry is what an informer store holds for one Secret or ConfigMap, in place of the object:
// nothing but a pointer to its summary. It has no field that could hold Secret data, annotations
// (kubectl's last-applied-configuration annotation carries the whole Secret, data included) or
// managedFields.
//
// It implements metav1.Object itself, reading the few fields the informer machinery asks for
// (the store's namespace/name key, the reflector's resourceVersion, the handlers' UID) from the
// summary, instead of carrying a metav1.ObjectMeta: that struct is ~300 bytes, a tenth of what
// the inventory kept per Secret before (docs/benchmarks.md). Setters do nothing: summaries are
// immutable and shared, and neither the reflector, the DeltaFIFO nor the indexer set metadata.
type entry[S summary] struct {
	Summary S
}

// summary is what an entry holds.
type summary interface {
	*kube.SecretSummary | *kube.ConfigMapSummary
}

// objectRef is the identifying metadata of a summarized object.
type objectRef struct {
	namespace, name string
	uid             string
	resourceVersion string
	created         time.Time
}

type (
	secretEntry    = entry[*kube.SecretSummary]
	configMapEntry = entry[*kube.ConfigMapSummary]
)

func (e *entry[S]) ref() objectRef {
	switch s := any(e.Summary).(type) {
	case *kube.SecretSummary:
		return objectRef{s.Namespace, s.Name, s.UID, s.ResourceVersion, s.CreatedAt}
	case *kube.ConfigMapSummary:
		return objectRef{s.Namespace, s.Name, s.UID, s.ResourceVersion, s.CreatedAt}
	}
	panic("unreachable: summary's type set has two types")
}

// DeepCopyObject shares the summary, which is immutable.
func (e *entry[S]) DeepCopyObject() runtime.Object { c := *e; return &c }

// GetObjectKind: entries carry no type information (nor did the typed objects the reflector
// decodes from a list).
func (e *entry[S]) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (e *entry[S]) GetNamespace() string       { return e.ref().namespace }
func (e *entry[S]) GetName() string            { return e.ref().name }
func (e *entry[S]) GetUID() types.UID          { return types.UID(e.ref().uid) }
func (e *entry[S]) GetResourceVersion() string { return e.ref().resourceVersion }
func (e *entry[S]) GetCreationTimestamp() metav1.Time {
	return metav1.NewTime(e.ref().created)
}

// The rest of metav1.Object: fields an entry deliberately does not keep.
func (e *entry[S]) GetGenerateName() string                       { return "" }
func (e *entry[S]) GetGeneration() int64                          { return 0 }
func (e *entry[S]) GetSelfLink() string                           { return "" }
func (e *entry[S]) GetDeletionTimestamp() *metav1.Time            { return nil }
func (e *entry[S]) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (e *entry[S]) GetLabels() map[string]string                  { return nil }
func (e *entry[S]) GetAnnotations() map[string]string             { return nil }
func (e *entry[S]) GetFinalizers() []string                       { return nil }
func (e *entry[S]) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (e *entry[S]) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (e *entry[S]) SetNamespace(string)                           {}
func (e *entry[S]) SetName(string)                                {}
func (e *entry[S]) SetGenerateName(string)                        {}
func (e *entry[S]) SetUID(types.UID)                              {}
func (e *entry[S]) SetResourceVersion(string)                     {}
func (e *entry[S]) SetGeneration(int64)                           {}
func (e *entry[S]) SetSelfLink(string)                            {}
func (e *entry[S]) SetCreationTimestamp(metav1.Time)              {}
func (e *entry[S]) SetDeletionTimestamp(*metav1.Time)             {}
func (e *entry[S]) SetDeletionGracePeriodSeconds(*int64)          {}
func (e *entry[S]) SetLabels(map[string]string)                   {}
func (e *entry[S]) SetAnnotations(map[string]string)              {}
func (e *entry[S]) SetFinalizers([]string)                        {}
func (e *entry[S]) SetOwnerReferences([]metav1.OwnerReference)    {}
func (e *entry[S]) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

var (
	_ metav1.Object  = (*secretEntry)(nil)
	_ runtime.Object = (*configMapEntry)(nil)
)
