package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestCommand builds the command, starts it as `make testbed` would, uses the kubeconfig it
// prints, interrupts it and checks that it exits 0 leaving no process and no directory behind.
func TestCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "testbed")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	cmd := exec.CommandContext(ctx, bin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start testbed command: %v", err)
	}
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("testbed stderr:\n%s", stderr.String())
		}
	}()

	var kubeconfig, kubectl string
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if v, ok := strings.CutPrefix(line, "kubeconfig: "); ok {
			kubeconfig = v
		}
		if v, ok := strings.CutPrefix(line, "try:        "); ok {
			kubectl, _, _ = strings.Cut(v, " ")
		}
		if line == "press Ctrl-C to stop" {
			break
		}
	}
	if kubeconfig == "" || kubectl == "" {
		t.Fatalf("no kubeconfig and kubectl hint before \"press Ctrl-C to stop\"; stdout:\n%s", strings.Join(lines, "\n"))
	}
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		rest <- b.String()
	}()

	kctl := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "get", "ns", "kube-system", "-o", "name")
	kctl.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	out, err := kctl.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get ns with the printed kubeconfig: %v\n%s", err, out)
	}
	if diff := cmp.Diff("namespace/kube-system", strings.TrimSpace(string(out))); diff != "" {
		t.Errorf("kubectl get ns (-want +got):\n%s", diff)
	}

	// The default scenario (plain-sds) runs: `kubectl get pods -A` shows Running Envoy pods.
	kctl = exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "get", "pods", "-A", "--no-headers",
		"-o", "custom-columns=NS:.metadata.namespace,PHASE:.status.phase,IMAGE:.spec.containers[0].image")
	kctl.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	out, err = kctl.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get pods -A: %v\n%s", err, out)
	}
	running := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "plain-sds" && f[1] == "Running" && strings.Contains(f[2], "envoy") {
			running++
		}
	}
	if running != 2 {
		t.Errorf("kubectl get pods -A: %d Running Envoy pods in plain-sds, want 2:\n%s", running, out)
	}

	children := childPIDs(t, cmd.Process.Pid)
	if len(children) < 3 {
		t.Errorf("testbed command has %d child processes %v, want etcd, kube-apiserver and kube-controller-manager", len(children), children)
	}
	dir := filepath.Dir(kubeconfig)

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		exited = true
		if err != nil {
			t.Errorf("testbed command after SIGINT: %v, want exit 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("testbed command still running 60 s after SIGINT")
	}
	if tail := <-rest; !strings.Contains(tail, "testbed stopped") {
		t.Errorf("stdout after SIGINT does not say \"testbed stopped\":\n%s", tail)
	}
	for _, pid := range children {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("child process %d still exists after the command exited (kill 0: %v)", pid, err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("testbed directory %s still exists after the command exited (stat: %v)", dir, err)
	}
}

// childPIDs lists the processes whose parent is pid, from /proc.
func childPIDs(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	var kids []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...; comm may contain spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			kids = append(kids, n)
		}
	}
	return kids
}

func TestRunRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		args       []string
		wantCode   int
		wantStderr string
	}{
		"UnknownFlag":     {args: []string{"-nope"}, wantCode: 2, wantStderr: "flag provided but not defined: -nope"},
		"ExtraArgument":   {args: []string{"extra"}, wantCode: 2, wantStderr: `unexpected arguments ["extra"]`},
		"MissingBinaries": {args: []string{"-bin-dir", "/nonexistent-certdrift-bin"}, wantCode: 1, wantStderr: "scripts/build-kube.sh"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.wantCode {
				t.Errorf("run(%q) = %d, want %d; stderr:\n%s", tc.args, code, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("run(%q) stderr does not contain %q:\n%s", tc.args, tc.wantStderr, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("run(%q) printed to stdout: %q", tc.args, stdout.String())
			}
		})
	}
}
