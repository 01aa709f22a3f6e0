package gather

import (
	"encoding/json"
	"testing"
)

// TestInventorySizeJSON: `certdrift audit --inventory-only` prints exactly what it printed when it
// encoded a map (keys sorted), which test/scale and people's scripts parse.
func TestInventorySizeJSON(t *testing.T) {
	size := InventorySize{Certificates: 5003, ConfigMaps: 2, ListRequests: 6, ListedObjects: 5500, Secrets: 5000,
		SecretsParsed: map[string]int64{"kubernetes.io/tls": 5000, "Opaque": 500}, SyncSeconds: 1.25}
	asMap := map[string]any{"secrets": size.Secrets, "configmaps": size.ConfigMaps, "certificates": size.Certificates,
		"list_requests": size.ListRequests, "listed_objects": size.ListedObjects, "secrets_parsed": size.SecretsParsed,
		"sync_seconds": size.SyncSeconds}
	got, err := json.Marshal(size)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(asMap)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("InventorySize encodes as\n%s\nwant the map's encoding\n%s", got, want)
	}
}
