package inventory

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestCompareKeys: Snapshot's order must stay that of the "namespace/name" strings.
func TestCompareKeys(t *testing.T) {
	parts := []string{"", "a", "a-b", "ab", "a0", "b", "a.b", "z", "a-", "aa"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		ans, an := parts[r.IntN(len(parts))], parts[r.IntN(len(parts))]
		bns, bn := parts[r.IntN(len(parts))], parts[r.IntN(len(parts))]
		want := strings.Compare(ans+"/"+an, bns+"/"+bn)
		if got := compareKeys(ans, an, bns, bn); got != want {
			t.Fatalf("compareKeys(%q, %q, %q, %q) = %d, want %d", ans, an, bns, bn, got, want)
		}
	}
}
