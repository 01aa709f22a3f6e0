package envoytest

import (
	"fmt"
	"os"
	"path/filepath"
)

// LocateBinary is ResolveBinary for callers that are not tests, such as the testbed's node
// agent, which runs Envoy pods for as long as the testbed lives: it returns the binary chosen by
// the environment, or an error saying how to get one.
func LocateBinary() (Binary, error) {
	b, err := resolveBinary()
	if err != nil {
		return Binary{}, fmt.Errorf("no Envoy binary: %w\n%s", err, howToGetEnvoy)
	}
	return b, nil
}

// CachedBinary returns the Envoy of version if <repo>/.cache/envoy/<version>/envoy exists and
// reports that version; it never fetches. The node agent uses it to honour an image tag such as
// envoyproxy/envoy:v1.36.2 when that version happens to be cached.
func CachedBinary(version string) (Binary, error) {
	if !versionRE.MatchString(version) {
		return Binary{}, fmt.Errorf("%q is not a version like 1.40.0", version)
	}
	key := "cached\x00" + version
	resolveMu.Lock()
	defer resolveMu.Unlock()
	if b, ok := resolveCache[key]; ok {
		return b, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return Binary{}, err
	}
	p := filepath.Join(root, ".cache", "envoy", version, "envoy")
	if _, err := os.Stat(p); err != nil {
		return Binary{}, fmt.Errorf("Envoy %s is not cached: %w", version, err)
	}
	b, err := probeBinary(p, version)
	if err != nil {
		return Binary{}, err
	}
	resolveCache[key] = b
	return b, nil
}
