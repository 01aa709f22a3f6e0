package files

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/certdrift/certdrift/internal/boundedfile"
	"github.com/certdrift/certdrift/pki"
)

// ErrNotRegular is returned for a path that is a directory, device, FIFO or socket where a file
// was expected.
var ErrNotRegular = boundedfile.ErrNotRegular

// readLimited reads at most max bytes of the regular file at path through boundedfile (no open
// that blocks on a FIFO, no read past max). Errors carry the underlying cause without the path:
// callers name the configured path, which is what the user wrote, rather than the resolved one.
// An oversized file is pki.ErrTooLarge, as an oversized PEM block is.
func readLimited(path string, max int) ([]byte, time.Time, error) {
	data, fi, err := boundedfile.Read(path, int64(max))
	if err != nil {
		err = unwrapPath(err)
		if errors.Is(err, boundedfile.ErrTooLarge) {
			err = fmt.Errorf("%w: %w", pki.ErrTooLarge, err)
		}
		return nil, time.Time{}, err
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
