// Package serve proves `certdrift serve` end to end: the real certdrift binary watches real Envoy
// processes (test/envoytest) whose certificates the tests rotate in kubelet-layout directories
// (test/atomicdir), and a real Prometheus (Debian's prometheus package) scrapes it; the tests
// assert on what Prometheus's HTTP API returns.
package serve

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var certdriftBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "certdrift-serve-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	certdriftBin = filepath.Join(dir, "certdrift")
	build := exec.Command("go", "build", "-o", certdriftBin, "-ldflags", "-X main.version=v0.0.0-e2e -X main.commit=e2e",
		"github.com/certdrift/certdrift/cmd/certdrift")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build certdrift:", err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
