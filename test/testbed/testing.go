package testbed

import (
	"context"
	"strings"
	"testing"
)

// StartT starts a testbed for t and stops it when t finishes, printing the end of every
// component log first if t failed. It fails t (never skips) when the testbed cannot start,
// including when the binaries have not been built.
func StartT(t testing.TB, opts Options) *Testbed {
	t.Helper()
	tb, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	t.Logf("testbed started in %s (dir %s)", tb.StartDuration.Round(1e7), tb.Dir)
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			tb.DumpLogs(&b, 40)
			t.Log(b.String())
		}
		if err := tb.Stop(); err != nil {
			t.Errorf("stop testbed: %v", err)
		}
	})
	return tb
}
