package main

import (
	"fmt"
	"os"
)

// runner lets the demo use the test helpers (test/certs, test/envoytest) outside `go test`: it
// implements the small part of testing.TB they call, with cleanups run at exit and Fatalf ending
// the demo with a message.
type runner struct {
	dir      string
	keep     bool
	cleanups []func()
	failed   bool
}

type fatal struct{ msg string }

func newRunner(keep bool) *runner {
	dir, err := os.MkdirTemp("", "certdrift-demo-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	return &runner{dir: dir, keep: keep}
}

func (r *runner) Helper() {}

func (r *runner) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (r *runner) Errorf(format string, args ...any) {
	r.failed = true
	r.Logf(format, args...)
}

func (r *runner) Fatalf(format string, args ...any) {
	r.failed = true
	panic(fatal{fmt.Sprintf(format, args...)})
}

func (r *runner) Failed() bool { return r.failed }

func (r *runner) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

// TempDir returns a new directory inside the demo's directory.
func (r *runner) TempDir() string {
	d, err := os.MkdirTemp(r.dir, "")
	if err != nil {
		r.Fatalf("%v", err)
	}
	return d
}

func (r *runner) recoverFatal(code *int) {
	if p := recover(); p != nil {
		f, ok := p.(fatal)
		if !ok {
			panic(p)
		}
		fmt.Fprintln(os.Stderr, "demo failed:", f.msg)
		*code = 2
	}
}

// cleanup runs cleanups in reverse order (stopping the Envoys) and removes the directory.
func (r *runner) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	if r.keep {
		fmt.Println("kept", r.dir)
		return
	}
	os.RemoveAll(r.dir)
}
