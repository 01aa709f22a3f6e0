package atomicdir

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Current returns the name ..data points at (e.g. "..2026_11_22_04_01_02.123456789").
func Current(dir string) (string, error) {
	ts, err := os.Readlink(filepath.Join(dir, DataLink))
	if err != nil {
		return "", fmt.Errorf("atomicdir: read %s in %s: %w", DataLink, dir, err)
	}
	return ts, nil
}

// Dangle removes the timestamped directory ..data points at, leaving ..data and every visible
// symlink dangling: what a reader sees if the volume is torn down under it, or a hand-made copy
// of a pod volume that kept only the symlinks.
func Dangle(dir string) error {
	ts, err := Current(dir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(dir, ts)); err != nil {
		return fmt.Errorf("atomicdir: remove %s: %w", ts, err)
	}
	return nil
}

// Interrupted does the first half of an update and stops where a crashed kubelet would: the new
// timestamped directory is written and ..data_tmp points at it, but ..data still names the old
// version. Readers must keep seeing the old version. It returns the new directory's name.
func Interrupted(dir string, files map[string][]byte) (string, error) {
	clean, err := validate(files)
	if err != nil {
		return "", fmt.Errorf("atomicdir %s: %w", dir, err)
	}
	tsPath, err := newTimestampDir(dir, time.Now())
	if err != nil {
		return "", fmt.Errorf("atomicdir: create timestamped dir in %s: %w", dir, err)
	}
	if err := writePayload(tsPath, clean); err != nil {
		return "", fmt.Errorf("atomicdir: write payload into %s: %w", tsPath, err)
	}
	tmp := filepath.Join(dir, DataTmpLink)
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(tsPath), tmp); err != nil {
		return "", fmt.Errorf("atomicdir: create %s: %w", tmp, err)
	}
	return filepath.Base(tsPath), nil
}

// SetTime sets the modification time of the current timestamped directory, which readers use as
// "when the content last changed", so tests can pin it.
func SetTime(dir string, t time.Time) error {
	ts, err := Current(dir)
	if err != nil {
		return err
	}
	p := filepath.Join(dir, ts)
	if err := os.Chtimes(p, t, t); err != nil {
		return fmt.Errorf("atomicdir: set time of %s: %w", p, err)
	}
	return nil
}
