package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KubeVersion is the Kubernetes release the testbed runs; scripts/build-kube.sh builds it.
const KubeVersion = "v1.36.3"

// BinDirEnv overrides where the control-plane binaries are found.
const BinDirEnv = "CERTDRIFT_KUBE_BIN_DIR"

const modulePath = "github.com/certdrift/certdrift"

// binaryNames are the files BinDir must hold.
var binaryNames = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"}

// buildHint says how to get the binaries; every "missing binary" error carries it.
const buildHint = "build them once with `scripts/build-kube.sh` from the repository root " +
	"(about 25 minutes the first time on 2 busy cores; later runs reuse .cache/kube), or point " + BinDirEnv +
	" at a directory holding etcd, kube-apiserver, kube-controller-manager and kubectl"

// findBinDir returns the directory holding the control-plane binaries, checking each exists and
// is executable.
func findBinDir(explicit string) (string, error) {
	dir := explicit
	if dir == "" {
		dir = os.Getenv(BinDirEnv)
	}
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("locate control-plane binaries: %w; %s", err, buildHint)
		}
		dir = filepath.Join(root, ".cache", "kube", KubeVersion)
	}
	for _, name := range binaryNames {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("control-plane binary %s: %w; %s", p, err, buildHint)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("control-plane binary %s is not an executable file; %s", p, buildHint)
		}
	}
	return dir, nil
}

// repoRoot walks up from the working directory (a package directory under `go test`) to the
// directory whose go.mod declares the certdrift module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working directory: %w", err)
	}
	for {
		ok, err := declaresModule(filepath.Join(dir, "go.mod"))
		if err != nil {
			return "", err
		}
		if ok {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod declaring " + modulePath + " above the working directory")
		}
		dir = parent
	}
}

func declaresModule(gomod string) (bool, error) {
	f, err := os.Open(gomod)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", gomod, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == modulePath, nil
		}
	}
	return false, nil
}
