package gather

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/probe/kube/inventory"
)

// InventorySize is the desired view's size once the inventory has synced, and what reading it
// cost: what `certdrift audit --inventory-only` prints for test/scale, which times it against a
// bare list loop. It holds counts only, nothing of the Secrets. Fields are in the order the
// command has always printed them (alphabetical, as a JSON object of a map).
type InventorySize struct {
	Certificates  int              `json:"certificates"`
	ConfigMaps    int              `json:"configmaps"`
	ListRequests  int64            `json:"list_requests"`
	ListedObjects int64            `json:"listed_objects"`
	Secrets       int              `json:"secrets"`
	SecretsParsed map[string]int64 `json:"secrets_parsed"`
	// SyncSeconds is from the call to the completed initial lists.
	SyncSeconds float64 `json:"sync_seconds"`
}

// SyncInventory runs the Secret/ConfigMap inventory alone to its initial sync (up to
// opt.SyncTimeout, default 30s), measures it and stops it.
func SyncInventory(ctx context.Context, rc *rest.Config, opt KubeOptions) (InventorySize, error) {
	start := time.Now()
	inv, err := inventory.New(rc, opt.InventoryOptions())
	if err != nil {
		return InventorySize{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = inv.Run(runCtx) }()
	defer func() { stop(); <-done }()
	syncCtx, cancel := context.WithTimeout(ctx, cmp.Or(opt.SyncTimeout, 30*time.Second))
	err = inv.WaitSynced(syncCtx)
	cancel()
	if err != nil {
		return InventorySize{}, fmt.Errorf("read the cluster: %w", err)
	}
	took := time.Since(start)
	snap := inv.Snapshot()
	st := inv.Stats()
	size := InventorySize{Secrets: len(snap.Secrets), ConfigMaps: len(snap.ConfigMaps), ListRequests: st.ListRequests,
		ListedObjects: st.ListedObjects, SecretsParsed: st.SecretsParsed, SyncSeconds: took.Seconds()}
	for _, s := range snap.Secrets {
		size.Certificates += len(s.Items)
	}
	return size, nil
}
