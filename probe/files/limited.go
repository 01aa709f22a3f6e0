package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/certdrift/certdrift/pki"
)

// ErrNotRegular is returned for a path that is a directory, device, FIFO or socket where a file
// was expected.
var ErrNotRegular = errors.New("not a regular file")

// readLimited reads at most max bytes of the regular file at path. It refuses an oversized file
// from its size before reading a byte, and still bounds the read because the file may grow (or be
// a pseudo-file whose size lies). Errors carry the underlying cause without the path: callers
// name the configured path, which is what the user wrote, rather than the resolved one.
func readLimited(path string, max int) ([]byte, time.Time, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, time.Time{}, unwrapPath(err)
	}
	if fi.IsDir() {
		return nil, time.Time{}, fmt.Errorf("%w: is a directory", ErrNotRegular)
	}
	if !fi.Mode().IsRegular() {
		return nil, time.Time{}, fmt.Errorf("%w: mode %s", ErrNotRegular, fi.Mode().Type())
	}
	if fi.Size() > int64(max) {
		return nil, time.Time{}, fmt.Errorf("%w: %d bytes > %d", pki.ErrTooLarge, fi.Size(), max)
	}
	// O_NONBLOCK: if the path was swapped for a FIFO after the Stat, open must not hang forever.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, time.Time{}, unwrapPath(err)
	}
	defer f.Close()
	if ofi, err := f.Stat(); err != nil || !ofi.Mode().IsRegular() {
		return nil, time.Time{}, fmt.Errorf("%w: changed type while opening", ErrNotRegular)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, time.Time{}, unwrapPath(err)
	}
	if len(data) > max {
		return nil, time.Time{}, fmt.Errorf("%w: more than %d bytes", pki.ErrTooLarge, max)
	}
	return data, fi.ModTime(), nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
