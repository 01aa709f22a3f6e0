package inventory

import (
	"encoding/json"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writerStamp is one managedFields entry that owns data: who wrote it, how, and when the API
// server last stamped the entry (Unix seconds: the stamps have one-second resolution).
type writerStamp struct {
	manager, operation string
	at                 int64
}

func (w writerStamp) time() time.Time { return time.Unix(w.at, 0).UTC() }

// dataWriters lists the managedFields entries that own any of the given top-level fields
// ("f:data", "f:stringData", "f:binaryData").
//
// The API server stamps an entry's time when its manager adds, changes or removes one of the
// fields it owns, so the entry owning f:data moves when a controller (cert-manager) or a person
// (kubectl apply/edit) rewrites the data. The stamp also moves if the same manager changes a label
// in the same request, which is rare for the writers of certificate Secrets and errs towards
// "changed later", the safe side for a grace period.
func dataWriters(mf []metav1.ManagedFieldsEntry, strings *interner, fields ...string) []writerStamp {
	var out []writerStamp
	for i := range mf {
		e := &mf[i]
		if e.Time == nil || e.FieldsV1 == nil || len(e.FieldsV1.GetRawBytes()) == 0 || !ownsAny(e.FieldsV1.GetRawBytes(), fields) {
			continue
		}
		out = append(out, writerStamp{manager: strings.get(e.Manager), operation: strings.get(string(e.Operation)), at: e.Time.Unix()})
	}
	return out
}

// latestWriter picks the writer of the newest data change. Stamps have one-second resolution and
// a manager that shares a key with the new writer (an unchanged ca.crt) keeps owning data with
// its old stamp, so an entry that is new or re-stamped since prev wins over one seen before;
// among equals, the newest stamp.
func latestWriter(cur, prev []writerStamp) (writerStamp, bool) {
	var best writerStamp
	found, bestFresh := false, false
	for _, w := range cur {
		fresh := !slices.Contains(prev, w)
		if !found || (fresh && !bestFresh) || (fresh == bestFresh && w.at > best.at) {
			best, found, bestFresh = w, true, fresh
		}
	}
	return best, found
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
