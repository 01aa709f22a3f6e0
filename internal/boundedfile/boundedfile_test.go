package boundedfile_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/certdrift/certdrift/internal/boundedfile"
)

// hostile makes the odd inputs a configured path may name: a FIFO nobody writes to, a device
// that never ends, a socket, a directory, a file over the limit.
func hostile(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"fifo": fifo, "sock": sock, "big": big, "ok": ok, "dir": dir,
		"missing": filepath.Join(dir, "missing"), "zero": "/dev/zero"}
}

func TestRead(t *testing.T) {
	p := hostile(t)
	cases := map[string]struct {
		reason  string
		path    string
		wantErr error
		why     string
	}{
		"Regular":   {reason: "a small regular file is read whole", path: p["ok"]},
		"FIFO":      {reason: "a FIFO without writer must not block the open", path: p["fifo"], wantErr: boundedfile.ErrNotRegular, why: "FIFO"},
		"DevZero":   {reason: "an endless device is refused before reading", path: p["zero"], wantErr: boundedfile.ErrNotRegular, why: "device"},
		"Socket":    {reason: "a unix socket cannot be opened as a file", path: p["sock"], wantErr: syscall.ENXIO},
		"Directory": {reason: "a directory is not a file", path: p["dir"], wantErr: boundedfile.ErrNotRegular, why: "directory"},
		"TooLarge":  {reason: "size is checked against the limit", path: p["big"], wantErr: boundedfile.ErrTooLarge, why: "2048 bytes > 1024"},
		"Missing":   {reason: "the system error is kept", path: p["missing"], wantErr: fs.ErrNotExist},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			type res struct {
				data []byte
				err  error
			}
			done := make(chan res, 1)
			go func() {
				data, _, err := boundedfile.Read(tc.path, 1024)
				done <- res{data, err}
			}()
			var r res
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: Read(%s) still blocked after 5s", tc.reason, tc.path)
			}
			if tc.wantErr == nil {
				if r.err != nil || string(r.data) != "hello" {
					t.Fatalf("%s: got %q, %v", tc.reason, r.data, r.err)
				}
				return
			}
			if !errors.Is(r.err, tc.wantErr) {
				t.Fatalf("%s: error %v, want %v", tc.reason, r.err, tc.wantErr)
			}
			var pe *fs.PathError
			if !errors.As(r.err, &pe) || pe.Path != tc.path {
				t.Errorf("%s: error %v does not name the path %s", tc.reason, r.err, tc.path)
			}
			if !strings.Contains(r.err.Error(), tc.why) {
				t.Errorf("%s: error %q does not say %q", tc.reason, r.err, tc.why)
			}
		})
	}
}

// TestReadGrowing: a pseudo-file whose size says 0 but which yields more than the limit is cut
// at the limit, not read whole.
func TestReadGrowing(t *testing.T) {
	// /proc/self/maps is a regular file of size 0 in stat, with content.
	_, _, err := boundedfile.Read("/proc/self/maps", 16)
	if !errors.Is(err, boundedfile.ErrTooLarge) {
		t.Fatalf("error %v, want ErrTooLarge", err)
	}
}

func TestOpenDir(t *testing.T) {
	p := hostile(t)
	d, err := boundedfile.OpenDir(p["dir"])
	if err != nil {
		t.Fatalf("OpenDir of a directory: %v", err)
	}
	d.Close()
	for _, name := range []string{"fifo", "ok", "zero"} {
		done := make(chan error, 1)
		go func() {
			d, err := boundedfile.OpenDir(p[name])
			if err == nil {
				d.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, boundedfile.ErrNotDir) {
				t.Errorf("OpenDir(%s): %v, want ErrNotDir", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("OpenDir(%s) blocked", name)
		}
	}
}
