package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane component running as a child process, its stdout and stderr
// going to <dir>/logs/<name>.log.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{} // closed when the process has exited and waitErr is set
	waitErr error
}

func startProcess(name, bin string, args []string, logDir string) (*process, error) {
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, fmt.Errorf("create log directory %s: %w", logDir, err)
	}
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log %s: %w", name, logPath, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Components inherit nothing from a developer's shell that could change their behaviour
	// (KUBECONFIG, ETCD_* variables, proxies).
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + logDir}
	cmd.SysProcAttr = childAttrs()
	if err := startChild(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exitErr returns a non-nil error once the process has exited.
func (p *process) exitErr() error {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return fmt.Errorf("%s exited with status 0", p.name)
		}
		return fmt.Errorf("%s exited: %w", p.name, p.waitErr)
	default:
		return nil
	}
}

// stop asks the process to terminate and kills it after grace; a component that exits
// because of the signal is not an error.
func (p *process) stop(grace time.Duration) error {
	if p.exitErr() != nil {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s after %s: %w", p.name, grace, err)
	}
	<-p.done
	return nil
}

// maxLogRead bounds how much of a component log is read back into memory.
const maxLogRead = 4 << 20

// tail returns the last n lines of the process log.
func (p *process) tail(n int) string {
	return tailFile(p.logPath, n)
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxLogRead {
		if _, err := f.Seek(fi.Size()-maxLogRead, io.SeekStart); err != nil {
			return fmt.Sprintf("(cannot seek %s: %v)", path, err)
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxLogRead))
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// failure describes a component that did not come up, with the end of its log, so a failed
// start explains itself without anyone opening files.
func (p *process) failure(what string, err error) error {
	if exit := p.exitErr(); exit != nil {
		err = exit
	}
	return fmt.Errorf("%s: %w\n--- last lines of %s ---\n%s", what, err, p.logPath, indent(p.tail(30)))
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// freePorts reserves n distinct loopback ports. They are released before the components bind
// them, so another process could take one in between; the window is small and a clash shows up
// as a component failing to start with "address already in use" in its log.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve a loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
