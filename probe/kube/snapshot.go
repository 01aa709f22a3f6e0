package kube

import (
	"time"

	"github.com/certdrift/certdrift/ref"
)

// Snapshot is the desired view at one moment: the inventory's summaries (each store read once
// under its lock; summaries are immutable, so later events never change a Snapshot), or the
// Secrets and ConfigMaps read by name (inventory.Inventory.Fetch).
type Snapshot struct {
	At     time.Time
	Synced bool
	// Secrets are sorted by namespace/name, Secrets with no certificate item left out. They are the
	// store's own summaries (immutable), not copies: a snapshot of 10,000 Secrets costs a slice.
	Secrets    []*SecretSummary
	ConfigMaps []ConfigMapSummary // sorted by namespace/name; ConfigMaps with no bundle left out
	Errors     []SourceError
}

// SourceError is the last failure of one informer (or one read), kept until a request succeeds.
type SourceError struct {
	Source string    `json:"source"`
	At     time.Time `json:"at"`
	Err    error     `json:"-"`
}

// ChangeOp is what happened to a summary.
type ChangeOp string

// Change operations.
const (
	Added   ChangeOp = "added"
	Updated ChangeOp = "updated"
	Deleted ChangeOp = "deleted"
)

// Change is passed to inventory.Options.OnChange once the store reflects it, so a Snapshot taken inside the
// hook already shows it. Exactly one of Secret and ConfigMap is set; on Deleted it is the last
// known summary.
type Change struct {
	Op        ChangeOp
	Kind      ref.Kind // ref.Secret or ref.ConfigMap
	Namespace string
	Name      string
	// Secret is the new summary (the last one for Deleted); nil for a stub, which holds no
	// certificates (SecretSummary.Stub).
	Secret    *SecretSummary
	ConfigMap *ConfigMapSummary
	// Initial marks an Added that belongs to the informer's first list. Those arrive on the
	// handler goroutine after WaitSynced returned (client-go delivers notifications
	// asynchronously), so a consumer that already reads the whole inventory once it is synced
	// can ignore them instead of treating 10,000 of them as fresh changes.
	Initial bool
}
