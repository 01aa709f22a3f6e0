// Package cdbin builds the certdrift command and runs it the way a user does, for the tests that
// prove certdrift end to end: one build per test binary, then runs with a deadline that report
// the exit code, stdout and stderr.
package cdbin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const pkg = "github.com/certdrift/certdrift/cmd/certdrift"

var (
	once     sync.Once
	builtDir string
	builtBin string
	buildErr error
)

// Build builds cmd/certdrift once per test binary and returns its path.
func Build() (string, error) {
	once.Do(func() {
		builtDir, buildErr = os.MkdirTemp("", "certdrift-bin-")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(builtDir, "certdrift")
		out, err := exec.Command("go", "build", "-o", builtBin, pkg).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	return builtBin, buildErr
}

// Main is a TestMain body: it builds certdrift into *bin, runs the tests and removes the build.
func Main(m *testing.M, bin *string) {
	path, err := Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "build certdrift:", err)
		os.Exit(2)
	}
	*bin = path
	code := m.Run()
	os.RemoveAll(builtDir)
	os.Exit(code)
}

// Result is what one run of certdrift did.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Output is stdout then stderr, labelled, for failure messages.
func (r Result) Output() string {
	return "--- stdout:\n" + r.Stdout + "--- stderr:\n" + r.Stderr
}

// Run runs bin with args (and env, when not nil, as the whole environment) until it exits or
// ctx ends. A non-zero exit is a Result, not an error; an error means it could not run.
func Run(ctx context.Context, bin string, env []string, args ...string) (Result, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		r.Code = ee.ExitCode()
	default:
		return r, fmt.Errorf("run certdrift %v: %w", args, errors.Join(err, ctx.Err()))
	}
	return r, nil
}

// LeaksKey reports whether out carries private key material: a PEM private key header, or a
// line of the base64 body of one of keys (PEM-encoded keys the test minted).
func LeaksKey(out string, keys [][]byte) bool {
	if strings.Contains(out, "PRIVATE KEY") {
		return true
	}
	for _, k := range keys {
		lines := strings.Split(string(k), "\n")
		if len(lines) > 2 && lines[1] != "" && strings.Contains(out, lines[1]) {
			return true
		}
	}
	return false
}
