package kube

import (
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dataWriter finds, in managedFields, the newest entry that owns any of the given top-level
// fields ("f:data", "f:stringData", "f:binaryData") and returns its manager and time.
//
// The API server stamps an entry's time when its manager adds, changes or removes one of the
// fields it owns, so the entry owning f:data moves when a controller (cert-manager) or a person
// (kubectl apply/edit) rewrites the data. The stamp also moves if the same manager changes a label
// in the same request, which is rare for the writers of certificate Secrets and errs towards
// "changed later", the safe side for a grace period.
func dataWriter(mf []metav1.ManagedFieldsEntry, fields ...string) (manager string, at time.Time, ok bool) {
	for i := range mf {
		e := &mf[i]
		if e.Time == nil || e.FieldsV1 == nil || len(e.FieldsV1.Raw) == 0 {
			continue
		}
		if !ownsAny(e.FieldsV1.Raw, fields) {
			continue
		}
		if t := e.Time.Time; !ok || t.After(at) {
			manager, at, ok = e.Manager, t, true
		}
	}
	return manager, at, ok
}

// maxFieldsV1 bounds the managedFields JSON decoded per entry: a merged Secret with hundreds of
// keys stays far below it, and a hostile object cannot make the transform decode megabytes.
const maxFieldsV1 = 256 << 10

func ownsAny(raw []byte, fields []string) bool {
	if len(raw) > maxFieldsV1 {
		return false
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return false
	}
	for _, f := range fields {
		if _, ok := top[f]; ok {
			return true
		}
	}
	return false
}
