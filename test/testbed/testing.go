package testbed

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
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

// Shared is one testbed for all the tests of a package, started by the first test that asks
// for it (so tests that need no cluster run without one) and stopped by Main:
//
//	var bed = testbed.Shared{Options: testbed.Options{Nodes: -1}}
//	func TestMain(m *testing.M) { os.Exit(bed.Main(m)) }
//
// Tests sharing it keep apart by namespace.
type Shared struct {
	Options Options

	once sync.Once
	tb   *Testbed
	err  error
}

// Get returns the shared testbed, starting it on first use. It fails t (never skips) when the
// testbed cannot start, including when the binaries have not been built.
func (s *Shared) Get(t testing.TB) *Testbed {
	t.Helper()
	s.once.Do(func() { s.tb, s.err = Start(context.Background(), s.Options) })
	if s.err != nil {
		t.Fatalf("testbed (build the binaries with `make kube`): %v", s.err)
	}
	return s.tb
}

// Main runs the package's tests and stops the testbed if one was started, printing the end of
// every component log first when a test failed. It returns the exit code for os.Exit.
func (s *Shared) Main(m *testing.M) int {
	code := m.Run()
	if s.tb != nil {
		if code != 0 {
			s.tb.DumpLogs(os.Stderr, 30)
		}
		if err := s.tb.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop testbed:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// StartEnvoyGatewayT starts the real Envoy Gateway control plane on tb for t (see
// StartEnvoyGateway) and stops it when t finishes, before the testbed (cleanups run last in,
// first out), printing the end of its log first if t failed. It fails t (never skips) when the
// control plane cannot start, including when envoy-gateway has not been built.
func StartEnvoyGatewayT(t testing.TB, tb *Testbed, opts EnvoyGatewayOptions) *EnvoyGateway {
	t.Helper()
	eg, err := tb.StartEnvoyGateway(context.Background(), opts)
	if err != nil {
		t.Fatalf("envoy-gateway: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- last 60 lines of %s ---\n%s", eg.LogPath, eg.LogTail(60))
		}
		if err := eg.Stop(); err != nil {
			t.Errorf("stop envoy-gateway: %v", err)
		}
	})
	return eg
}
