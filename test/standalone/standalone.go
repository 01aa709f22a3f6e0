// Package standalone lets commands (the demo, the dashboard renderer) use the test helpers
// (test/certs, test/envoytest, ...) outside `go test`: Runner implements the part of testing.TB
// they call, with cleanups run at the end and Fatalf ending the run with a message.
package standalone

import (
	"fmt"
	"os"
)

// Runner is a testing.TB stand-in for one run of a command. Its temporary directory is removed at
// the end unless Keep is set.
type Runner struct {
	name     string
	dir      string
	Keep     bool
	cleanups []func()
	failed   bool
}

type fatal struct{ msg string }

// New makes a Runner with a fresh temporary directory named after the command. It exits the
// process (status 2) when no directory can be made: nothing has started yet.
func New(name string) *Runner {
	dir, err := os.MkdirTemp("", "certdrift-"+name+"-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	return &Runner{name: name, dir: dir}
}

// Dir is the run's temporary directory.
func (r *Runner) Dir() string { return r.dir }

func (r *Runner) Helper() {}

func (r *Runner) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (r *Runner) Errorf(format string, args ...any) {
	r.failed = true
	r.Logf(format, args...)
}

func (r *Runner) Fatalf(format string, args ...any) {
	r.failed = true
	panic(fatal{fmt.Sprintf(format, args...)})
}

func (r *Runner) Failed() bool { return r.failed }

func (r *Runner) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

// TempDir returns a new directory inside the run's directory.
func (r *Runner) TempDir() string {
	d, err := os.MkdirTemp(r.dir, "")
	if err != nil {
		r.Fatalf("%v", err)
	}
	return d
}

// Run calls f; a Fatalf inside it prints "<name> failed: msg" and makes Run return failCode (any
// other panic goes on). Then the cleanups run in reverse order and the directory is removed, or
// kept and named when Keep is set. It returns 0 when f returned normally.
func (r *Runner) Run(f func(), failCode int) (code int) {
	defer r.cleanup()
	defer func() {
		if p := recover(); p != nil {
			ft, ok := p.(fatal)
			if !ok {
				panic(p)
			}
			fmt.Fprintf(os.Stderr, "%s failed: %s\n", r.name, ft.msg)
			code = failCode
		}
	}()
	f()
	return 0
}

func (r *Runner) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	if r.Keep {
		fmt.Println("kept", r.dir)
		return
	}
	os.RemoveAll(r.dir)
}
