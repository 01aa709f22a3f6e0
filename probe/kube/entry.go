package kube

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// secretEntry is what an informer store holds for one Secret, in place of the Secret: the
// identifying metadata (for the store's namespace/name key and the reflector's resourceVersion
// bookkeeping) and the summary. It has no field that could hold Secret data, annotations (kubectl's
// last-applied-configuration annotation carries the whole Secret, data included) or managedFields.
type secretEntry struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Summary *SecretSummary
}

// DeepCopyObject copies the metadata; the summary is immutable and shared.
func (e *secretEntry) DeepCopyObject() runtime.Object {
	c := *e
	e.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// configMapEntry is secretEntry's counterpart for ConfigMaps.
type configMapEntry struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Summary *ConfigMapSummary
}

// DeepCopyObject copies the metadata; the summary is immutable and shared.
func (e *configMapEntry) DeepCopyObject() runtime.Object {
	c := *e
	e.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// entryList is what the paginated lister returns: entries already summarized, page by page.
type entryList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

// DeepCopyObject copies the list; the entries are shared (the reflector only reads them).
func (l *entryList) DeepCopyObject() runtime.Object {
	c := *l
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	c.Items = append([]runtime.Object(nil), l.Items...)
	return &c
}

// entryMeta keeps only what the store and the reflector need.
func entryMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp,
	}
}
