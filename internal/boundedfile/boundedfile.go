// Package boundedfile is the one way certdrift reads a file it is told about: desired
// certificates and keys, client certificates, the configuration file, the web configuration and
// the files that names. Any of these paths may be a FIFO, a device, /dev/zero or a file that
// keeps growing; reading one must neither block the process nor exhaust its memory, and must
// fail with an error that names the file and says why.
//
// It imports only the standard library so that low-level packages (config, probe/files) and
// cmd/certdrift can all use it without bending the import direction.
package boundedfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

var (
	// ErrNotRegular: the path is a FIFO, socket, device or directory where a file was expected.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file holds more than the caller's limit.
	ErrTooLarge = errors.New("larger than the size limit")
	// ErrNotDir: OpenDir was given something other than a directory.
	ErrNotDir = errors.New("not a directory")
)

// Read returns the content of the regular file at path, at most max bytes, and the file's
// metadata as seen through the opened descriptor.
//
// The open uses O_NONBLOCK, so a FIFO with no writer cannot block it (a plain open would wait for
// a writer forever, and no context can interrupt that system call); the descriptor is then
// checked with fstat, so a path swapped between a stat and the open is judged by what was
// actually opened; a device such as /dev/zero is refused before a byte is read; and the read
// stops at max+1 bytes because a regular file may grow while read, or be a pseudo-file whose size
// says 0. Errors are *fs.PathError with Op "read" and the path as given, wrapping ErrNotRegular,
// ErrTooLarge or the system error.
func Read(path string, max int64) ([]byte, fs.FileInfo, error) {
	fail := func(err error) ([]byte, fs.FileInfo, error) {
		return nil, nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0)
	if err != nil {
		return fail(cause(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fail(cause(err))
	}
	if err := regular(fi); err != nil {
		return fail(err)
	}
	if fi.Size() > max {
		return fail(fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, fi.Size(), max))
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return fail(cause(err))
	}
	if int64(len(data)) > max {
		return fail(fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max))
	}
	return data, fi, nil
}

// OpenDir opens the directory at path for listing. Like Read it cannot block on a FIFO put where
// the directory was, and refuses anything that is not a directory.
func OpenDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			err = ErrNotDir
		}
		return nil, &fs.PathError{Op: "open directory", Path: path, Err: cause(err)}
	}
	return f, nil
}

func regular(fi fs.FileInfo) error {
	switch m := fi.Mode(); {
	case m.IsRegular():
		return nil
	case m.IsDir():
		return fmt.Errorf("%w: is a directory", ErrNotRegular)
	case m&fs.ModeNamedPipe != 0:
		return fmt.Errorf("%w: is a FIFO (named pipe)", ErrNotRegular)
	case m&fs.ModeSocket != 0:
		return fmt.Errorf("%w: is a socket", ErrNotRegular)
	case m&fs.ModeDevice != 0:
		return fmt.Errorf("%w: is a device", ErrNotRegular)
	default:
		return fmt.Errorf("%w: mode %s", ErrNotRegular, m.Type())
	}
}

// cause strips the *fs.PathError of os so that the error names the path once.
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
