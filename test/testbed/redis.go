package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// redisHint says how to get redis-server; every "missing" error carries it.
const redisHint = "install Debian's redis-server (apt-get install redis-server; .ci/run does)"

// Redis is a redis-server the testbed runs as a child process of the test, behind a Service: the
// backend the rate limit service counts in (Envoy Gateway's rateLimit.backend.redis.url). It
// listens only on a unix socket in its own directory (no TCP port: nothing on the machine can
// collide with it or reach it except through the Service relay), keeps nothing on disk, and is
// stopped with the testbed's other processes by Stop.
type Redis struct {
	// Service is "name.namespace.svc.cluster.local:6379", the address pods are given.
	Service string
	// Version is the first line of `redis-server --version`.
	Version string

	proc     *process
	socket   string
	unroute  func()
	stopOnce sync.Once
}

// StartRedis starts redis-server and creates the Service namespace/name (port 6379, no
// selector: the testbed routes it to the process), creating the namespace if needed.
func (tb *Testbed) StartRedis(ctx context.Context, namespace, name string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found: %w; %s", err, redisHint)
	}
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w; %s", bin, err, redisHint)
	}
	r := &Redis{Version: strings.TrimSpace(lastLines(string(out), 1))}
	dir := filepath.Join(tb.Dir, "redis-"+namespace+"-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	r.socket = filepath.Join(dir, "redis.sock")
	// Arguments, not a config file: --port 0 (no TCP listener), the socket, no persistence.
	args := []string{"--port", "0", "--unixsocket", r.socket, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no"}
	if r.proc, err = startProcess("redis-"+namespace+"-"+name, bin, args, tb.lay.logDir()); err != nil {
		return nil, err
	}
	if err := r.waitReady(ctx); err != nil {
		r.Stop()
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := tb.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		r.Stop()
		return nil, fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "redis", Port: 6379, TargetPort: intstr.FromInt32(6379)},
		}},
	}
	if _, err := tb.Client.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		r.Stop()
		return nil, fmt.Errorf("create Service %s/%s: %w", namespace, name, err)
	}
	tb.RouteServiceToHost(namespace, name, func(ctx context.Context, _ int) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", r.socket)
	})
	r.unroute = func() { tb.RouteServiceToHost(namespace, name, nil) }
	r.Service = fmt.Sprintf("%s.%s.svc.cluster.local:6379", name, namespace)
	return r, nil
}

// waitReady waits until redis answers PING on its socket.
func (r *Redis) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		if err := r.proc.exitErr(); err != nil {
			return r.proc.failure("redis-server", err)
		}
		if last = r.ping(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return r.proc.failure("redis-server not ready", fmt.Errorf("%w (last: %v)", ctx.Err(), last))
		case <-time.After(pollEvery):
		}
	}
}

func (r *Redis) ping(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", r.socket)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), "+PONG") {
		return errors.New("PING answered " + strings.TrimSpace(string(buf[:n])))
	}
	return nil
}

// Stop removes the route and stops redis-server.
func (r *Redis) Stop() error {
	var err error
	r.stopOnce.Do(func() {
		if r.unroute != nil {
			r.unroute()
		}
		err = r.proc.stop(stopGrace)
	})
	return err
}
