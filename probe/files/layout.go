package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// dataLink is the kubelet's swap point; see test/atomicdir for the whole layout.
const dataLink = "..data"

// ErrDangling is returned when ..data names a directory that does not exist (a volume torn down
// under the reader, or a copy that kept only the symlinks).
var ErrDangling = errors.New("..data symlink is dangling")

// view is one directory as it was at one moment: where its files are read from.
type view struct {
	dir     string    // as configured
	base    string    // where files are read: dir, or dir/<resolved ..data>
	dataDir string    // resolved ..data target; "" for a plain directory
	changed time.Time // mtime of the resolved data directory (kubelet layout only)
}

// resolve reads dir's ..data symlink once. Every file of one read goes through the returned base,
// so a kubelet swap during the read cannot mix two versions.
func resolve(dir string) (*view, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("source directory %s: %w", dir, unwrapPath(err))
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("source directory %s: %w", dir, ErrNotDir)
	}
	link := filepath.Join(dir, dataLink)
	li, err := os.Lstat(link)
	if errors.Is(err, fs.ErrNotExist) {
		return &view{dir: dir, base: dir}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("source directory %s: inspect %s: %w", dir, dataLink, unwrapPath(err))
	}
	if li.Mode()&fs.ModeSymlink == 0 {
		// A real "..data" directory is not the kubelet's doing; read the directory as it is.
		return &view{dir: dir, base: dir}, nil
	}
	for attempt := 1; ; attempt++ {
		target, err := os.Readlink(link)
		if err != nil {
			return nil, fmt.Errorf("source directory %s: read %s: %w", dir, dataLink, unwrapPath(err))
		}
		base := target
		if !filepath.IsAbs(base) {
			base = filepath.Join(dir, target)
		}
		ti, err := os.Stat(base)
		if errors.Is(err, fs.ErrNotExist) {
			// The kubelet deletes the old version right after the swap: if ..data has moved
			// since we read it, resolve again rather than report a dangling link.
			if now, lerr := os.Readlink(link); lerr == nil && now != target && attempt < maxAttempts {
				continue
			}
			return nil, fmt.Errorf("source directory %s: %w (-> %s)", dir, ErrDangling, target)
		}
		if err != nil {
			return nil, fmt.Errorf("source directory %s: %s -> %s: %w", dir, dataLink, target, unwrapPath(err))
		}
		if !ti.IsDir() {
			return nil, fmt.Errorf("source directory %s: %s -> %s: %w", dir, dataLink, target, ErrNotDir)
		}
		return &view{dir: dir, base: base, dataDir: target, changed: ti.ModTime()}, nil
	}
}

// ErrNotDir is returned when a configured directory (or the ..data target) is not a directory.
var ErrNotDir = errors.New("not a directory")

// moved reports whether ..data has been swapped since v was resolved.
func (v *view) moved() bool {
	if v.dataDir == "" {
		return false
	}
	now, err := os.Readlink(filepath.Join(v.dir, dataLink))
	return err != nil || now != v.dataDir
}

// throughData reports whether path is a kubelet visible symlink ("name -> ..data/name"), which
// must then be read through its directory's resolved ..data rather than followed on its own.
func throughData(path string) bool {
	target, err := os.Readlink(path)
	return err == nil && strings.HasPrefix(filepath.ToSlash(target), dataLink+"/")
}
