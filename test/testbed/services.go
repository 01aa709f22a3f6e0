package testbed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// serviceRouter is the testbed's kube-proxy and cluster DNS, for the addresses Envoy configs
// name. A cluster gives every Service a DNS name (<name>.<namespace>.svc.cluster.local) and
// forwards its ClusterIP to ready endpoints; the testbed has neither, and control planes name
// their peers that way in the bootstraps they generate (Envoy Gateway's xds_cluster is a
// STRICT_DNS cluster for envoy-gateway.envoy-gateway-system.svc.cluster.local:18000).
//
// The node agent hands every such socket_address to Resolve (containers_envoy.go), which gives
// the Service port a relay: a listener on routerIP, at a port of its own, that forwards each
// connection as raw TCP (TLS stays end to end) to one backend chosen when the connection
// arrives, so a replaced pod is reached as through a real Service:
//   - a host backend registered with RouteToHost: a control plane the testbed runs as a host
//     process in a network namespace of its own (Envoy Gateway, envoygateway.go), or
//   - a Running, Ready, not terminating pod the Service selects, at the port's targetPort
//     (a number, or a name looked up in the pod's container ports).
//
// A name whose Service does not exist still gets a relay; connections to it are closed, as a
// connection to a name DNS cannot resolve fails. routerIP lies outside every node's
// 127.0.N.0/24 and 127.1.N.0/24, so the node agent leaves it as it is; relays listen on ephemeral
// ports, so parallel testbeds on one machine never collide.
type serviceRouter struct {
	client kubernetes.Interface
	domain string
	log    *slog.Logger

	mu     sync.Mutex
	relays map[servicePort]*net.TCPListener
	hosts  map[serviceName]func(ctx context.Context, port int) (net.Conn, error)
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

var routerIP = netip.MustParseAddr("127.2.0.1")

type serviceName struct{ namespace, name string }

type servicePort struct {
	serviceName
	port int
}

func newServiceRouter(client kubernetes.Interface, log *slog.Logger) *serviceRouter {
	return &serviceRouter{
		client: client, domain: "cluster.local", log: log,
		relays: map[servicePort]*net.TCPListener{},
		hosts:  map[serviceName]func(context.Context, int) (net.Conn, error){},
		conns:  map[net.Conn]bool{},
	}
}

// parseServiceHost recognises <name>.<namespace>.svc and <name>.<namespace>.svc.<domain>.
func (r *serviceRouter) parseServiceHost(host string) (serviceName, bool) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	h = strings.TrimSuffix(h, "."+r.domain)
	parts := strings.Split(h, ".")
	if len(parts) != 3 || parts[2] != "svc" || parts[0] == "" || parts[1] == "" {
		return serviceName{}, false
	}
	return serviceName{namespace: parts[1], name: parts[0]}, true
}

// Resolve returns the relay address for host:port when host is a Service's cluster DNS name.
func (r *serviceRouter) Resolve(host string, port int) (netip.AddrPort, bool) {
	svc, ok := r.parseServiceHost(host)
	if !ok || port <= 0 || port > 65535 {
		return netip.AddrPort{}, false
	}
	key := servicePort{svc, port}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return netip.AddrPort{}, false
	}
	if ln := r.relays[key]; ln != nil {
		return ln.Addr().(*net.TCPAddr).AddrPort(), true
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(routerIP, 0)))
	if err != nil {
		r.log.Error("service relay", "service", svc.namespace+"/"+svc.name, "port", port, "err", err)
		return netip.AddrPort{}, false
	}
	r.relays[key] = ln
	r.wg.Add(1)
	go r.serve(ln, key)
	r.log.Info("service relay", "service", svc.namespace+"/"+svc.name, "port", port, "relay", ln.Addr().String())
	return ln.Addr().(*net.TCPAddr).AddrPort(), true
}

// RouteToHost makes the Service namespace/name reach dial (a host process) instead of pods.
func (r *serviceRouter) RouteToHost(namespace, name string, dial func(ctx context.Context, port int) (net.Conn, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if dial == nil {
		delete(r.hosts, serviceName{namespace, name})
		return
	}
	r.hosts[serviceName{namespace, name}] = dial
}

func (r *serviceRouter) serve(ln *net.TCPListener, key servicePort) {
	defer r.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			up, err := r.dialBackend(ctx, key)
			cancel()
			if err != nil {
				r.log.Warn("service relay: no backend", "service", key.namespace+"/"+key.name, "port", key.port, "err", err)
				c.Close()
				return
			}
			if !r.track(c, up) {
				return
			}
			relay(c, up)
			r.untrack(c, up)
		}()
	}
}

func (r *serviceRouter) dialBackend(ctx context.Context, key servicePort) (net.Conn, error) {
	svc, err := r.client.CoreV1().Services(key.namespace).Get(ctx, key.name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if int(svc.Spec.Ports[i].Port) == key.port {
			sp = &svc.Spec.Ports[i]
		}
	}
	if sp == nil {
		return nil, fmt.Errorf("no port %d on the Service", key.port)
	}
	r.mu.Lock()
	host := r.hosts[key.serviceName]
	r.mu.Unlock()
	if host != nil {
		target := key.port
		if sp.TargetPort.IntValue() != 0 {
			target = sp.TargetPort.IntValue()
		}
		return host(ctx, target)
	}
	if len(svc.Spec.Selector) == 0 {
		return nil, errors.New("no selector on the Service and no host backend")
	}
	pods, err := r.client.CoreV1().Pods(key.namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !hasCondition(p.Status.Conditions, corev1.PodReady) {
			continue
		}
		target := targetPort(sp, &p)
		if target == 0 {
			continue
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(p.Status.PodIP, fmt.Sprint(target)))
	}
	return nil, errors.New("no Ready pod behind the Service")
}

// targetPort resolves a Service port's targetPort for one pod: a number, a container port
// name, or (unset) the Service port itself.
func targetPort(sp *corev1.ServicePort, p *corev1.Pod) int {
	if n := sp.TargetPort.IntValue(); n != 0 {
		return n
	}
	if name := sp.TargetPort.StrVal; name != "" {
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == name {
					return int(cp.ContainerPort)
				}
			}
		}
		return 0
	}
	return int(sp.Port)
}

func (r *serviceRouter) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = true
	}
	return true
}

func (r *serviceRouter) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conns, c)
	}
}

// Close stops every relay and the connections they carry.
func (r *serviceRouter) Close() {
	r.mu.Lock()
	r.closed = true
	for _, ln := range r.relays {
		ln.Close()
	}
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// RouteServiceToHost makes connections to the Service namespace/name, through its cluster DNS
// name in an Envoy config, reach dial (called with the Service port's targetPort) instead of the
// pods the Service selects: for a control plane the testbed runs as a host process. A nil dial
// removes the route. Without node agents (Options.Nodes < 0) nothing resolves names, and this
// does nothing.
func (tb *Testbed) RouteServiceToHost(namespace, name string, dial func(ctx context.Context, port int) (net.Conn, error)) {
	if tb.services != nil {
		tb.services.RouteToHost(namespace, name, dial)
	}
}
