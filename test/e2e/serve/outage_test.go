package serve

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

// apiProxy forwards TCP to the API server until cut, and can be restored on the same address:
// an outage of the API server as certdrift sees it, without stopping the testbed.
type apiProxy struct {
	addr, upstream string
	mu             sync.Mutex
	l              net.Listener
	conns          []net.Conn
}

func newAPIProxy(t *testing.T, upstream string) *apiProxy {
	t.Helper()
	p := &apiProxy{upstream: upstream}
	if err := p.start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p.addr = p.l.Addr().String()
	t.Cleanup(p.cut)
	return p
}

func (p *apiProxy) start(addr string) error {
	return p.listen(addr, func(c net.Conn) []net.Conn {
		u, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			c.Close()
			return nil
		}
		go func() { _, _ = io.Copy(u, c); u.Close() }()
		go func() { _, _ = io.Copy(c, u); c.Close() }()
		return []net.Conn{c, u}
	})
}

// listen accepts on addr until cut, handing each connection to handle, which returns the
// connections cut must close.
func (p *apiProxy) listen(addr string, handle func(net.Conn) []net.Conn) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held := handle(c)
			p.mu.Lock()
			p.conns = append(p.conns, held...)
			p.mu.Unlock()
		}
	}()
	return nil
}

// cut closes the listener and every forwarded connection.
func (p *apiProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestServeKubernetesAPIOutage: with the API server unreachable, certdrift_source_up{kubernetes}
// drops to 0 and the request errors count, the last results stay exposed with their age, and all
// recovers when the API server is back.
func TestServeKubernetesAPIOutage(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ca := certs.NewCA(t, certs.WithCommonName("serve-outage-ca"))
	deployScenario(ctx, t, tb, "plain-sds", ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost)))

	proxy, proxied := proxiedKubeconfig(t, tb)

	x := startServe(t, "--kubeconfig", proxied, "--namespace", "plain-sds", "--interval", "1s", "--jitter", "0",
		"--admin-access", "direct", "--timeout", "2s")
	waitFor(t, "the first round with the API server up", 60*time.Second, func() (bool, string) {
		body := x.metrics(t)
		v, ok := metricValue(body, `certdrift_source_up{source="kubernetes"}`)
		return ok && v == 1 && strings.Contains(body, `source="plain-sds/web-tls",view="desired"`), body
	})

	// Every request counts, not only failures: the denominator of the request-error ratio alert.
	if v, ok := metricValue(x.metrics(t), `certdrift_kubernetes_requests_total{code="200"}`); !ok || v == 0 {
		t.Errorf("certdrift_kubernetes_requests_total{code=\"200\"} = %v (present %v) after a round that listed Secrets and pods", v, ok)
	}

	proxy.cut()
	cutAt := time.Now()
	waitFor(t, "certdrift_source_up{kubernetes} to drop to 0", 60*time.Second, func() (bool, string) {
		body := x.metrics(t)
		v, ok := metricValue(body, `certdrift_source_up{source="kubernetes"}`)
		return ok && v == 0, body
	})
	t.Logf("API server cut: source_up 0 after %s", time.Since(cutAt).Round(100*time.Millisecond))
	body := x.metrics(t)
	if !strings.Contains(body, `source="plain-sds/web-tls",view="desired"`) {
		t.Error("the desired view disappeared during the outage: the last results must stay")
	}
	if !strings.Contains(body, `certdrift_kubernetes_request_errors_total{code="error"}`) {
		t.Errorf("no transport errors counted during the outage:\n%s", grep(body, "kubernetes"))
	}
	// A failed request is a request too: the ratio's numerator never exceeds its denominator.
	failed, _ := metricValue(body, `certdrift_kubernetes_request_errors_total{code="error"}`)
	if all, ok := metricValue(body, `certdrift_kubernetes_requests_total{code="error"}`); !ok || all < failed {
		t.Errorf("certdrift_kubernetes_requests_total{code=\"error\"} = %v, below the %v failed requests:\n%s", all, failed, grep(body, "kubernetes"))
	}
	if _, ok := metricValue(body, "certdrift_result_age_seconds"); !ok {
		t.Error("certdrift_result_age_seconds missing during the outage")
	}

	time.Sleep(3 * time.Second)
	if err := proxy.start(proxy.addr); err != nil {
		t.Fatalf("restore the API server proxy on %s: %v", proxy.addr, err)
	}
	restored := time.Now()
	waitFor(t, "recovery after the API server is back", 90*time.Second, func() (bool, string) {
		body := x.metrics(t)
		v, ok := metricValue(body, `certdrift_source_up{source="kubernetes"}`)
		return ok && v == 1, grep(body, "kubernetes")
	})
	t.Logf("API server back: source_up 1 after %s", time.Since(restored).Round(100*time.Millisecond))
}

func grep(body, s string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return fmt.Sprint(strings.Join(out, "\n"))
}
