// Command spawn runs one program and writes what the kernel accounted to it (wait4 rusage) to a
// file: `spawn -rusage FILE -- PROGRAM ARGS...`. scale.Measure starts its children through it
// because Linux charges a child started by a large process with that process's peak RSS: Go's
// os/exec starts children with vfork (CLONE_VM), so until execve the child runs in the parent's
// address space, and execve records that address space's high-water mark into the child's
// ru_maxrss (exec_mmap → setmax_mm_hiwater_rss). Started from this small process instead, the
// figure is the child's own peak plus at most this process's few MB.
//
// The program gets spawn's standard streams and environment; spawn exits with its exit code
// (128+signal when it was killed) and kills it if spawn itself dies (Pdeathsig).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// Usage is what spawn writes: the same fields scale.Usage holds.
type Usage struct {
	WallNanos   int64 `json:"wall_nanos"`
	MaxRSSBytes int64 `json:"max_rss_bytes"`
	UserNanos   int64 `json:"user_nanos"`
	SysNanos    int64 `json:"sys_nanos"`
}

func main() {
	out := flag.String("rusage", "", "write the program's rusage as JSON to this file")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: spawn -rusage FILE -- PROGRAM ARGS...")
		os.Exit(125)
	}
	// Pdeathsig follows the thread that started the child, so that thread must live as long as
	// the child does.
	runtime.LockOSThread()
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintf(os.Stderr, "spawn: %v\n", err)
		os.Exit(126)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		fmt.Fprintln(os.Stderr, "spawn: no rusage")
		os.Exit(126)
	}
	b, _ := json.Marshal(Usage{WallNanos: wall.Nanoseconds(), MaxRSSBytes: ru.Maxrss << 10, // Linux: KiB
		UserNanos: ru.Utime.Nano(), SysNanos: ru.Stime.Nano()})
	if err := os.WriteFile(*out, b, 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "spawn: %v\n", err)
		os.Exit(126)
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		os.Exit(128 + int(ws.Signal()))
	}
	os.Exit(ws.ExitStatus())
}
