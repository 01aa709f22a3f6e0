package scenarios

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// serviceProxy plays kube-proxy for one Service port, which the testbed does not have: it
// listens on a loopback address and forwards each connection, as raw TCP (TLS stays end to end
// between the Envoys), to a Ready pod the Service selects, chosen when the connection arrives,
// so a replaced pod is reached as through a real Service.
//
// It listens on 127.3.0.1 (loopback, like everything here): the node agent rewrites only
// 127.0.0.0/24 in an Envoy config to the pod's own localhost and leaves the rest of 127/8 alone,
// and there is no cluster DNS, so the Envoys name this address where a cluster would name the
// Service.
type serviceProxy struct {
	addr *net.TCPAddr
	ln   net.Listener
	wg   sync.WaitGroup
}

// startServiceProxy starts forwarding for Service ns/name port; it stops when the test ends.
func startServiceProxy(ctx context.Context, t *testing.T, ns, name string, port int32) *serviceProxy {
	t.Helper()
	ip := net.IPv4(127, 3, 0, 1)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatalf("service proxy for %s/%s: %v", ns, name, err)
	}
	p := &serviceProxy{addr: ln.Addr().(*net.TCPAddr), ln: ln}
	p.wg.Add(1)
	go p.serve(ctx, t, ns, name, port)
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *serviceProxy) serve(ctx context.Context, t *testing.T, ns, name string, port int32) {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return // closed at cleanup
		}
		// Only this machine's own processes (the Envoys) may use the relay.
		if ra, ok := conn.RemoteAddr().(*net.TCPAddr); !ok || !ra.IP.IsLoopback() {
			conn.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer conn.Close()
			target, err := serviceEndpoint(ctx, ns, name, port)
			if err != nil {
				t.Logf("service proxy %s/%s: %v", ns, name, err)
				return
			}
			up, err := net.DialTimeout("tcp", target, dialTimeout)
			if err != nil {
				t.Logf("service proxy %s/%s: dial %s: %v", ns, name, target, err)
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(up, conn); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			go func() { io.Copy(conn, up); conn.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			select {
			case <-done:
				<-done
			case <-time.After(time.Minute): // the scenario's exchanges are single requests
			}
		}()
	}
}

// serviceEndpoint is podIP:targetPort of a Ready, running, not terminating pod the Service
// selects.
func serviceEndpoint(ctx context.Context, ns, name string, port int32) (string, error) {
	svc, err := tb.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	target := port
	for _, sp := range svc.Spec.Ports {
		if sp.Port == port && sp.TargetPort.IntValue() != 0 {
			target = int32(sp.TargetPort.IntValue())
		}
	}
	pods, err := tb.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && podReady(p) {
			return hostPort(p.Status.PodIP, int(target)), nil
		}
	}
	return "", fmt.Errorf("no Ready pod behind Service %s/%s", ns, name)
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
