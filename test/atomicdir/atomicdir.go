// Package atomicdir writes directories in the layout the kubelet uses for Secret, ConfigMap and
// projected volumes, so that tests (and the testbed that plays the node) can produce exactly what
// Envoy and certdrift see in a real pod.
//
// The layout, as written by Kubernetes' AtomicWriter (pkg/volume/util/atomic_writer.go):
//
//	<dir>/..2026_11_22_04_01_02.123456789/tls.crt   the real files, in a hidden timestamped dir
//	<dir>/..data -> ..2026_11_22_04_01_02.123456789 the one symlink that is swapped on update
//	<dir>/tls.crt -> ..data/tls.crt                 one stable symlink per top-level key
//
// An update writes a new timestamped directory, points a "..data_tmp" symlink at it and renames
// that over "..data" (rename(2) replaces a symlink atomically), then adds symlinks for new keys,
// removes symlinks of keys that disappeared, and finally deletes the old timestamped directory.
// A reader that resolves "..data" once and reads every file through the resolved directory sees
// one consistent version, which is what probe/files relies on.
//
// Like the kubelet's writer, Write is not safe for concurrent use on the same directory.
package atomicdir

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Names reserved by the layout. Keys must not start with "..".
const (
	DataLink    = "..data"
	DataTmpLink = "..data_tmp"
)

// FileMode is the mode of projected files: the kubelet's default for Secret volumes
// (defaultMode 0644) when the pod spec sets none.
const FileMode fs.FileMode = 0o644

// Write projects files into dir in the kubelet's atomic layout. Keys are relative paths
// ("tls.crt", or "sub/file" whose top-level element becomes the visible symlink). dir is created
// if missing. As in the kubelet, nothing is written when the payload equals what ..data already
// holds.
func Write(dir string, files map[string][]byte) error {
	clean, err := validate(files)
	if err != nil {
		return fmt.Errorf("atomicdir %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("atomicdir: create %s: %w", dir, err)
	}
	dataPath := filepath.Join(dir, DataLink)
	oldTs, err := os.Readlink(dataPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("atomicdir: read %s: %w", dataPath, err)
	}
	var oldVisible map[string]bool
	if oldTs != "" {
		oldVisible, err = topLevel(filepath.Join(dir, oldTs))
		if err != nil {
			return fmt.Errorf("atomicdir: list %s: %w", oldTs, err)
		}
		same, err := samePayload(filepath.Join(dir, oldTs), clean)
		if err != nil {
			return fmt.Errorf("atomicdir: compare with %s: %w", oldTs, err)
		}
		if same {
			return nil
		}
	}

	tsPath, err := newTimestampDir(dir, time.Now())
	if err != nil {
		return fmt.Errorf("atomicdir: create timestamped dir in %s: %w", dir, err)
	}
	if err := writePayload(tsPath, clean); err != nil {
		_ = os.RemoveAll(tsPath)
		return fmt.Errorf("atomicdir: write payload into %s: %w", tsPath, err)
	}
	if err := swapData(dir, filepath.Base(tsPath)); err != nil {
		_ = os.RemoveAll(tsPath)
		return err
	}

	newVisible := map[string]bool{}
	for key := range clean {
		newVisible[firstElem(key)] = true
	}
	for _, name := range sortedKeys(newVisible) {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue // already a symlink into ..data, which now points at the new version
		}
		if err := os.Symlink(filepath.Join(DataLink, name), link); err != nil {
			return fmt.Errorf("atomicdir: create visible symlink %s: %w", link, err)
		}
	}
	for _, name := range sortedKeys(oldVisible) {
		if newVisible[name] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("atomicdir: remove old visible symlink %s: %w", name, err)
		}
	}
	if oldTs != "" && oldTs != filepath.Base(tsPath) {
		if err := os.RemoveAll(filepath.Join(dir, oldTs)); err != nil {
			return fmt.Errorf("atomicdir: remove old data dir %s: %w", oldTs, err)
		}
	}
	return nil
}

// swapData makes ..data point at tsName with one rename, the step that makes an update atomic.
func swapData(dir, tsName string) error {
	tmp := filepath.Join(dir, DataTmpLink)
	_ = os.Remove(tmp) // a leftover from an interrupted write would make Symlink fail
	if err := os.Symlink(tsName, tmp); err != nil {
		return fmt.Errorf("atomicdir: create %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, DataLink)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("atomicdir: rename %s over %s: %w", DataTmpLink, DataLink, err)
	}
	return nil
}

// newTimestampDir creates "..YYYY_MM_DD_HH_MM_SS.<digits>" as the kubelet does: the prefix is the
// UTC time and a temp-dir suffix keeps two writes within one second apart.
func newTimestampDir(dir string, now time.Time) (string, error) {
	p, err := os.MkdirTemp(dir, now.UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return "", err
	}
	// The kubelet chmods because MkdirTemp honours the umask and creates 0700.
	if err := os.Chmod(p, 0o755); err != nil {
		_ = os.RemoveAll(p)
		return "", err
	}
	return p, nil
}

func writePayload(tsPath string, files map[string][]byte) error {
	for _, key := range sortedKeys(files) {
		full := filepath.Join(tsPath, key)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, files[key], FileMode); err != nil {
			return err
		}
		if err := os.Chmod(full, FileMode); err != nil { // WriteFile's mode is masked by umask
			return err
		}
	}
	return nil
}

func samePayload(oldTsPath string, files map[string][]byte) (bool, error) {
	old := map[string]bool{}
	err := filepath.WalkDir(oldTsPath, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(oldTsPath, p)
			old[rel] = true
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // dangling ..data: rewrite
	}
	if err != nil {
		return false, err
	}
	if len(old) != len(files) {
		return false, nil
	}
	for key, want := range files {
		if !old[key] {
			return false, nil
		}
		got, err := os.ReadFile(filepath.Join(oldTsPath, key))
		if err != nil {
			return false, err
		}
		if !bytes.Equal(got, want) {
			return false, nil
		}
	}
	return true, nil
}

// topLevel lists the first path elements present in an old timestamped dir: the visible
// symlinks that version needed.
func topLevel(tsPath string) (map[string]bool, error) {
	entries, err := os.ReadDir(tsPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range entries {
		out[e.Name()] = true
	}
	return out, nil
}

// validate applies the kubelet's path rules: relative, no ".." element, not starting with "..",
// element at most 255 bytes, path at most 4096.
func validate(files map[string][]byte) (map[string][]byte, error) {
	if len(files) == 0 {
		return nil, errors.New("empty payload")
	}
	clean := make(map[string][]byte, len(files))
	for key, data := range files {
		if key == "" {
			return nil, errors.New("empty key")
		}
		if filepath.IsAbs(key) || len(key) > 4096 {
			return nil, fmt.Errorf("key %q: must be a relative path of at most 4096 bytes", key)
		}
		elems := strings.Split(key, "/")
		for _, e := range elems {
			if e == ".." || len(e) > 255 {
				return nil, fmt.Errorf("key %q: element %q is '..' or longer than 255 bytes", key, e)
			}
		}
		if strings.HasPrefix(elems[0], "..") {
			return nil, fmt.Errorf("key %q: names starting with '..' are reserved", key)
		}
		c := filepath.Clean(key)
		if c == "." {
			return nil, fmt.Errorf("key %q: names no file", key)
		}
		clean[c] = data
	}
	return clean, nil
}

func firstElem(key string) string {
	if i := strings.IndexByte(key, filepath.Separator); i >= 0 {
		return key[:i]
	}
	return key
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
