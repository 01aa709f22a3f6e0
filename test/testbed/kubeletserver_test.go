package testbed

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	//lint:ignore SA1019 client-go v0.37's portforward and spdy packages still take and return this package's Dialer, Connection and Stream, which are distinct types from k8s.io/streaming's
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Ports of the fake pod: an Envoy-admin stand-in listening on loopback only, and an echo server.
const (
	pfAdminPort  = 15000
	pfEchoPort   = 7
	pfClosedPort = 9 // nothing listens: dial fails
	pfNamespace  = "pf"
	pfPod        = "envoy-0"
	pfGhostPod   = "ghost" // in the API, bound to the node, unknown to the node
	pfNode       = "node-pf"
)

// pfFixture is a testbed with one Node whose kubelet endpoint is a KubeletServer, and a Running
// pod bound to it whose ports are local servers.
type pfFixture struct {
	tb       *Testbed
	srv      *KubeletServer
	nonce    string // the admin stand-in's answer, so a response cannot come from elsewhere
	uid      string
	logPath  string
	dialsMu  sync.Mutex
	dials    []string
	adminURL string
}

// TestKubeletServerPortForward proves that port-forwarding through the real API server reaches
// a pod's localhost-only port via the kubelet server: client-go over SPDY, client-go over the
// WebSocket tunnel (alone and with kubectl's SPDY fallback), and the real kubectl; and that
// unknown pods, closed ports, wrong callers and Close behave as with a kubelet.
func TestKubeletServerPortForward(t *testing.T) {
	f := newPFFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("SPDY", func(t *testing.T) {
		f.checkForward(t, f.spdyDialer(t, pfPod))
	})
	t.Run("WebSocketTunnel", func(t *testing.T) {
		// No fallback: this fails unless the API server's WebSocket tunnel works end to end.
		f.checkForward(t, f.tunnelDialer(t, pfPod))
	})
	t.Run("WebSocketTunnelWithSPDYFallback", func(t *testing.T) {
		f.checkForward(t, portforward.NewFallbackDialer(f.tunnelDialer(t, pfPod), f.spdyDialer(t, pfPod), kubectlShouldFallback))
	})
	t.Run("WebSocketV4Channels", func(t *testing.T) {
		f.checkWebSocketV4(t)
	})
	t.Run("Kubectl", func(t *testing.T) {
		f.checkKubectl(ctx, t, "true")
	})
	t.Run("KubectlSPDYOnly", func(t *testing.T) {
		f.checkKubectl(ctx, t, "false")
	})
	t.Run("PodUnknownToNode", func(t *testing.T) {
		for name, d := range map[string]httpstream.Dialer{
			"SPDY":   f.spdyDialer(t, pfGhostPod),
			"Tunnel": f.tunnelDialer(t, pfGhostPod),
		} {
			_, _, err := startForward(t, d, fmt.Sprint(pfAdminPort))
			if err == nil || !strings.Contains(err.Error(), "pod does not exist") {
				t.Errorf("%s: port-forward to a pod the node does not run: got %v, want the kubelet's \"pod does not exist\"", name, err)
			}
		}
	})
	t.Run("PodUnknownToAPIServer", func(t *testing.T) {
		_, _, err := startForward(t, f.spdyDialer(t, "no-such-pod"), fmt.Sprint(pfAdminPort))
		if err == nil || !strings.Contains(err.Error(), `pods "no-such-pod" not found`) {
			t.Errorf("port-forward to a missing pod: got %v, want the API server's not found", err)
		}
	})
	t.Run("ClosedPort", func(t *testing.T) {
		f.checkClosedPort(ctx, t)
	})
	t.Run("ContainerLogs", func(t *testing.T) {
		f.checkLogs(ctx, t)
	})
	t.Run("ContainerLogsFollow", func(t *testing.T) {
		f.checkLogsFollow(ctx, t)
	})
	t.Run("DirectCallers", func(t *testing.T) {
		f.checkDirectCallers(t)
	})
	t.Run("SessionsReleaseConnections", func(t *testing.T) {
		// Every session above has ended (their forwarders stopped with their subtests); only
		// the API server's idle keep-alive connections may remain tracked.
		const maxIdle = 3
		deadline := time.Now().Add(20 * time.Second)
		for {
			f.srv.mu.Lock()
			n := len(f.srv.conns)
			f.srv.mu.Unlock()
			if n <= maxIdle {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kubelet server still tracks %d connections after every session ended, want at most %d", n, maxIdle)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	// Last: it stops the server.
	t.Run("CloseEndsSessions", func(t *testing.T) {
		local, done, err := startForward(t, f.spdyDialer(t, pfPod), fmt.Sprint(pfEchoPort))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", local[0]))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
			t.Fatalf("echo before Close: %v", err)
		}
		if err := f.srv.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, portforward.ErrLostConnectionToPod) {
				t.Errorf("ForwardPorts after the kubelet server closed: got %v, want ErrLostConnectionToPod", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("port-forward session still open 30 s after the kubelet server closed")
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Error("forwarded connection still delivers data after Close")
		}
	})
}

func newPFFixture(t *testing.T) *pfFixture {
	t.Helper()
	tb := StartT(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := &pfFixture{tb: tb, nonce: rand.Text()}

	adminAddr := serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "admin %s %s\n", r.URL.Path, f.nonce)
	}))
	echoAddr := echoServer(t)
	closedAddr := closedPort(t)
	f.adminURL = "http://" + adminAddr
	ports := map[int32]string{pfAdminPort: adminAddr, pfEchoPort: echoAddr, pfClosedPort: closedAddr}

	cfg, err := tb.KubeletServerConfig(pfNode)
	if err != nil {
		t.Fatal(err)
	}
	cfg.LookupPod = func(namespace, name string) (string, bool) {
		if namespace == pfNamespace && name == pfPod && f.uid != "" {
			return f.uid, true
		}
		return "", false
	}
	f.logPath = filepath.Join(t.TempDir(), "envoy.log")
	if err := os.WriteFile(f.logPath, []byte("line 1\nline 2\nline 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.ContainerLogPath = func(namespace, pod, container string, previous bool) (string, error) {
		if namespace != pfNamespace || pod != pfPod || container != "envoy" || previous {
			return "", errors.New("no such container log")
		}
		return f.logPath, nil
	}
	dial := func(ctx context.Context, namespace, pod string, port int32) (net.Conn, error) {
		f.dialsMu.Lock()
		f.dials = append(f.dials, fmt.Sprintf("%s/%s:%d", namespace, pod, port))
		f.dialsMu.Unlock()
		addr, ok := ports[port]
		if namespace != pfNamespace || pod != pfPod || !ok {
			return nil, fmt.Errorf("pod %s/%s has no port %d", namespace, pod, port)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	f.srv, err = NewKubeletServer(cfg, dial)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.srv.Close(); err != nil {
			t.Errorf("close kubelet server: %v", err)
		}
	})

	registerNode(ctx, t, tb, pfNode, f.srv.Port())
	createNamespace(ctx, t, tb, pfNamespace)
	f.uid = runPodOn(ctx, t, tb, pfNamespace, pfPod, pfNode)
	runPodOn(ctx, t, tb, pfNamespace, pfGhostPod, pfNode)
	return f
}

// checkForward forwards the admin and echo ports and uses both, twice each, over one
// port-forward session.
func (f *pfFixture) checkForward(t *testing.T, d httpstream.Dialer) {
	t.Helper()
	local, done, err := startForward(t, d, "0:"+fmt.Sprint(pfAdminPort), "0:"+fmt.Sprint(pfEchoPort))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		checkAdmin(t, fmt.Sprintf("http://127.0.0.1:%d", local[0]), f.nonce)
		checkEcho(t, fmt.Sprintf("127.0.0.1:%d", local[1]), 256<<10+i)
	}
	select {
	case err := <-done:
		t.Errorf("port-forward ended early: %v", err)
	default:
	}
}

func (f *pfFixture) spdyDialer(t *testing.T, pod string) httpstream.Dialer {
	t.Helper()
	rt, upgrader, err := spdy.RoundTripperFor(f.tb.Config)
	if err != nil {
		t.Fatal(err)
	}
	return spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, f.portForwardURL(pod))
}

func (f *pfFixture) tunnelDialer(t *testing.T, pod string) httpstream.Dialer {
	t.Helper()
	d, err := portforward.NewSPDYOverWebsocketDialer(f.portForwardURL(pod), f.tb.Config)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (f *pfFixture) portForwardURL(pod string) *url.URL {
	return f.tb.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(pfNamespace).
		Name(pod).SubResource("portforward").URL()
}

// kubectlShouldFallback is kubectl's rule for retrying over SPDY when the WebSocket upgrade
// fails.
func kubectlShouldFallback(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// startForward runs client-go's port-forwarder until the test ends and returns the local
// ports in the order of specs, and the channel ForwardPorts' result arrives on.
func startForward(t *testing.T, d httpstream.Dialer, specs ...string) ([]uint16, <-chan error, error) {
	t.Helper()
	stop, ready := make(chan struct{}), make(chan struct{})
	var errOut bytes.Buffer
	pf, err := portforward.NewOnAddresses(d, []string{"127.0.0.1"}, specs, stop, ready, io.Discard, &errOut)
	if err != nil {
		return nil, nil, fmt.Errorf("new port-forwarder: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	t.Cleanup(func() { close(stop) })
	select {
	case <-ready:
	case err := <-done:
		return nil, nil, fmt.Errorf("port-forward ended before ready: %w", err)
	case <-time.After(30 * time.Second):
		return nil, nil, errors.New("port-forward not ready after 30 s")
	}
	fwd, err := pf.GetPorts()
	if err != nil {
		return nil, nil, err
	}
	local := make([]uint16, len(fwd))
	for i, p := range fwd {
		local[i] = p.Local
	}
	return local, done, nil
}

func checkAdmin(t *testing.T, base, nonce string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(base + "/server_info")
	if err != nil {
		t.Fatalf("GET %s/server_info through the port-forward: %v", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("read %s/server_info: %v", base, err)
	}
	if diff := cmp.Diff("admin /server_info "+nonce+"\n", string(body)); diff != "" {
		t.Errorf("admin answer through the port-forward (-want +got):\n%s", diff)
	}
}

// checkEcho sends n random bytes, half-closes, and expects them back followed by EOF: the
// half-close must travel through the API server and the kubelet server to the pod.
func checkEcho(t *testing.T, addr string, n int) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	sent := []byte(rand.Text())
	for len(sent) < n {
		sent = append(sent, rand.Text()...)
	}
	sent = sent[:n]
	werr := make(chan error, 1)
	go func() {
		_, err := conn.Write(sent)
		if err == nil {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read echo through the port-forward: %v (got %d of %d bytes)", err, len(got), n)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write to the port-forward: %v", err)
	}
	if !bytes.Equal(sent, got) {
		t.Errorf("echo through the port-forward: got %d bytes, want the %d sent (equal lengths: %v)", len(got), n, len(got) == n)
	}
}

var kubectlForwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)`)

// checkKubectl runs the real kubectl port-forward; websockets is KUBECTL_PORT_FORWARD_WEBSOCKETS.
func (f *pfFixture) checkKubectl(ctx context.Context, t *testing.T, websockets string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(f.tb.BinDir, "kubectl"), "--kubeconfig="+f.tb.KubeconfigPath,
		"-v=4", "port-forward", "-n", pfNamespace, "pod/"+pfPod, "--address=127.0.0.1",
		fmt.Sprintf(":%d", pfAdminPort), fmt.Sprintf(":%d", pfEchoPort))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "KUBECTL_PORT_FORWARD_WEBSOCKETS=" + websockets}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kubectl port-forward: %v", err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("kubectl stderr:\n%s", stderr.String())
		}
	}()
	local := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for len(local) < 2 && sc.Scan() {
		if m := kubectlForwarding.FindStringSubmatch(sc.Text()); m != nil {
			local[m[2]] = m[1]
		}
	}
	if len(local) < 2 {
		t.Fatalf("kubectl port-forward printed no \"Forwarding from\" line for both ports (got %v)", local)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	checkAdmin(t, "http://127.0.0.1:"+local[fmt.Sprint(pfAdminPort)], f.nonce)
	checkEcho(t, "127.0.0.1:"+local[fmt.Sprint(pfEchoPort)], 64<<10)
	// kubectl -v=4 logs when it gives up on the WebSocket tunnel and retries over SPDY.
	if websockets == "true" && strings.Contains(stderr.String(), "fallback to secondary dialer") {
		t.Errorf("kubectl fell back to SPDY; want the WebSocket tunnel to work")
	}
}

// checkWebSocketV4 uses the older WebSocket port-forward protocol (v4.channel.k8s.io, as
// browsers and non-Go clients speak it): the API server passes it through to the kubelet
// server, whose WebSocket path then carries the data. Channel 0 is data, 1 is errors; each
// starts with the port, little endian.
func (f *pfFixture) checkWebSocketV4(t *testing.T) {
	tlsCfg, err := rest.TLSConfigFor(f.tb.Config)
	if err != nil {
		t.Fatal(err)
	}
	u := f.portForwardURL(pfPod)
	u.Scheme = "wss"
	u.RawQuery = url.Values{"ports": {fmt.Sprint(pfEchoPort)}}.Encode()
	d := websocket.Dialer{TLSClientConfig: tlsCfg, Subprotocols: []string{"v4.channel.k8s.io"}, HandshakeTimeout: 10 * time.Second}
	conn, resp, err := d.Dial(u.String(), nil)
	if err != nil {
		t.Fatalf("WebSocket dial %s: %v (response %v)", u, err, resp)
	}
	defer conn.Close()
	if got := conn.Subprotocol(); got != "v4.channel.k8s.io" {
		t.Errorf("negotiated subprotocol %q, want v4.channel.k8s.io", got)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	read := func() (byte, []byte) {
		t.Helper()
		_, msg, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("read WebSocket message: %v", err)
		}
		if len(msg) == 0 {
			t.Fatal("empty WebSocket message: no channel byte")
		}
		return msg[0], msg[1:]
	}
	port := []byte{byte(pfEchoPort), byte(pfEchoPort >> 8)}
	got := map[byte][]byte{}
	for range 2 {
		ch, data := read()
		got[ch] = data
	}
	if diff := cmp.Diff(map[byte][]byte{0: port, 1: port}, got); diff != "" {
		t.Fatalf("initial port messages per channel (-want +got):\n%s", diff)
	}
	payload := []byte(rand.Text())
	if err := conn.WriteMessage(websocket.BinaryMessage, append([]byte{0}, payload...)); err != nil {
		t.Fatalf("write WebSocket message: %v", err)
	}
	var echoed []byte
	for len(echoed) < len(payload) {
		ch, data := read()
		if ch != 0 {
			t.Fatalf("message on channel %d (%q), want echo on data channel 0", ch, data)
		}
		echoed = append(echoed, data...)
	}
	if diff := cmp.Diff(string(payload), string(echoed)); diff != "" {
		t.Errorf("echo over v4 WebSocket (-want +got):\n%s", diff)
	}
}

// checkClosedPort forwards a port nothing listens on: the dial error reaches the client on the
// error stream (kubectl prints it) and client-go ends the session.
func (f *pfFixture) checkClosedPort(ctx context.Context, t *testing.T) {
	local, done, err := startForward(t, f.spdyDialer(t, pfPod), "0:"+fmt.Sprint(pfClosedPort))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", local[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := conn.Read(make([]byte, 16)); err == nil {
		t.Errorf("read %d bytes from a forwarded port nothing listens on", n)
	}
	select {
	case err := <-done:
		if !errors.Is(err, portforward.ErrLostConnectionToPod) {
			t.Errorf("ForwardPorts after a failed dial: got %v, want ErrLostConnectionToPod", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("port-forward still running 30 s after a failed dial")
	}

	// kubectl shows the kubelet server's message.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(f.tb.BinDir, "kubectl"), "--kubeconfig="+f.tb.KubeconfigPath,
		"port-forward", "-n", pfNamespace, "pod/"+pfPod, "--address=127.0.0.1", fmt.Sprintf(":%d", pfClosedPort))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var port string
	for port == "" && sc.Scan() {
		if m := kubectlForwarding.FindStringSubmatch(sc.Text()); m != nil {
			port = m[1]
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if port == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("kubectl port-forward printed no \"Forwarding from\" line; stderr:\n%s", stderr.String())
	}
	if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = c.Read(make([]byte, 1))
		c.Close()
	}
	err = cmd.Wait() // kubectl exits once the session is lost
	want := fmt.Sprintf("dial port %d of pod %s/%s: ", pfClosedPort, pfNamespace, pfPod)
	if err == nil || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "connection refused") {
		t.Errorf("kubectl port-forward to a closed port: exit %v, stderr does not contain %q:\n%s", err, want, stderr.String())
	}
}

// checkLogs reads the container log through the API server, as kubectl logs does.
func (f *pfFixture) checkLogs(ctx context.Context, t *testing.T) {
	two := int64(2)
	for name, tc := range map[string]struct {
		opts    corev1.PodLogOptions
		want    string
		wantErr string
	}{
		"All":        {opts: corev1.PodLogOptions{Container: "envoy"}, want: "line 1\nline 2\nline 3\n"},
		"TailLines":  {opts: corev1.PodLogOptions{Container: "envoy", TailLines: &two}, want: "line 2\nline 3\n"},
		"LimitBytes": {opts: corev1.PodLogOptions{Container: "envoy", LimitBytes: &two}, want: "li"},
		"Previous":   {opts: corev1.PodLogOptions{Container: "envoy", Previous: true}, wantErr: `in pod pf/envoy-0: no such container log`},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := f.tb.Client.CoreV1().Pods(pfNamespace).GetLogs(pfPod, &tc.opts).DoRaw(ctx)
			if tc.wantErr != "" {
				// DoRaw returns the API server's Status body next to a generic error.
				if !apierrors.IsBadRequest(err) || !strings.Contains(string(got), tc.wantErr) {
					t.Errorf("logs: got %v (%q), want BadRequest with a message containing %q", err, got, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("logs: %v", err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("logs (-want +got):\n%s", diff)
			}
		})
	}
}

// checkLogsFollow streams the log and sees a line appended after the stream started.
func (f *pfFixture) checkLogsFollow(ctx context.Context, t *testing.T) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	one := int64(1)
	rc, err := f.tb.Client.CoreV1().Pods(pfNamespace).GetLogs(pfPod, &corev1.PodLogOptions{Container: "envoy", Follow: true, TailLines: &one}).Stream(ctx)
	if err != nil {
		t.Fatalf("follow logs: %v", err)
	}
	defer rc.Close()
	r := bufio.NewReader(rc)
	first, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read followed log: %v", err)
	}
	lf, err := os.OpenFile(f.logPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lf.WriteString("line 4\n")
	if cerr := lf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	second, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read appended line from followed log: %v", err)
	}
	if diff := cmp.Diff([]string{"line 3\n", "line 4\n"}, []string{first, second}); diff != "" {
		t.Errorf("followed log (-want +got):\n%s", diff)
	}
}

// checkDirectCallers talks to the kubelet server without the API server: /healthz is open,
// the rest wants the API server's kubelet client certificate.
func (f *pfFixture) checkDirectCallers(t *testing.T) {
	anonymous, err := f.tb.mtlsClient("ignored")
	if err != nil {
		t.Fatal(err)
	}
	anonymous.Transport.(*http.Transport).TLSClientConfig.Certificates = nil
	admin, err := f.tb.mtlsClient(adminUser, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	apiserver, err := f.tb.mtlsClient(KubeletClientUser, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*http.Client{anonymous, admin, apiserver} {
		defer c.CloseIdleConnections()
	}
	base := "https://" + f.srv.Addr()
	pfPath := "/portForward/" + pfNamespace + "/" + pfPod
	for name, tc := range map[string]struct {
		client *http.Client
		path   string
		status int
		body   string
	}{
		"HealthzAnonymous":   {client: anonymous, path: "/healthz", status: 200, body: "ok"},
		"PortForwardNoCert":  {client: anonymous, path: pfPath, status: 401, body: "Unauthorized\n"},
		"PortForwardAdmin":   {client: admin, path: pfPath, status: 403},
		"WrongUID":           {client: apiserver, path: pfPath + "/not-the-uid", status: 404, body: "pod not found\n"},
		"UnknownPod":         {client: apiserver, path: "/portForward/" + pfNamespace + "/nobody", status: 404, body: "pod does not exist\n"},
		"RightUIDNoUpgrade":  {client: apiserver, path: pfPath + "/" + f.uid, status: 400},
		"LogsOfUnknownPod":   {client: apiserver, path: "/containerLogs/" + pfNamespace + "/nobody/envoy", status: 404, body: "pod does not exist\n"},
		"LogsBadTailLines":   {client: apiserver, path: "/containerLogs/" + pfNamespace + "/" + pfPod + "/envoy?tailLines=-1", status: 400},
		"LogsOK":             {client: apiserver, path: "/containerLogs/" + pfNamespace + "/" + pfPod + "/envoy?tailLines=1&limitBytes=4", status: 200, body: "line"},
		"UnknownEndpoint404": {client: apiserver, path: "/exec/" + pfNamespace + "/" + pfPod + "/envoy", status: 404},
	} {
		t.Run(name, func(t *testing.T) {
			resp, err := tc.client.Get(base + tc.path)
			if err != nil {
				t.Fatalf("GET %s: %v", tc.path, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			if resp.StatusCode != tc.status {
				t.Errorf("GET %s: status %d, want %d (body %q)", tc.path, resp.StatusCode, tc.status, body)
			}
			if tc.body != "" {
				if diff := cmp.Diff(tc.body, string(body)); diff != "" {
					t.Errorf("GET %s body (-want +got):\n%s", tc.path, diff)
				}
			}
		})
	}
}

// registerNode creates a Ready Node at 127.0.0.1 whose kubelet endpoint is port.
func registerNode(ctx context.Context, t *testing.T, tb *Testbed, name string, port int) {
	t.Helper()
	node, err := tb.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	node.Status = corev1.NodeStatus{
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
			{Type: corev1.NodeHostName, Address: name},
		},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
	}
	if _, err := tb.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status of node %s: %v", name, err)
	}
}

// createNamespace creates ns and waits for its default ServiceAccount, without which pods are
// refused.
func createNamespace(ctx context.Context, t *testing.T, tb *Testbed, ns string) {
	t.Helper()
	if _, err := tb.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	for {
		if _, err := tb.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("namespace %s: no default ServiceAccount: %v", ns, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// runPodOn creates a pod bound to node (no scheduler) and marks it Running, as a kubelet
// would; kubectl port-forward refuses pods that are not Running. It returns the pod's UID.
func runPodOn(ctx context.Context, t *testing.T, tb *Testbed, ns, name, node string) string {
	t.Helper()
	no := false
	pod, err := tb.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "envoy", Image: "envoyproxy/envoy:v1.40.0",
				Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: pfAdminPort}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "127.0.0.1",
		PodIP:     "127.0.0.1",
		StartTime: &now,
		Conditions: []corev1.PodCondition{{
			Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now,
		}},
	}
	if _, err := tb.Client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("mark pod %s/%s Running: %v", ns, name, err)
	}
	return string(pod.UID)
}

// serveLocal serves h on a loopback port until the test ends and returns its address.
func serveLocal(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// echoServer copies every connection back to itself until the client half-closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(time.Minute))
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestTailOffset(t *testing.T) {
	for name, tc := range map[string]struct {
		content string
		lines   int64
		want    string
	}{
		"Empty":                {content: "", lines: 3, want: ""},
		"Zero":                 {content: "a\nb\n", lines: 0, want: ""},
		"LastLine":             {content: "a\nb\n", lines: 1, want: "b\n"},
		"MoreThanThere":        {content: "a\nb\n", lines: 5, want: "a\nb\n"},
		"Exactly":              {content: "a\nb\n", lines: 2, want: "a\nb\n"},
		"UnterminatedLastLine": {content: "a\nb\nc", lines: 2, want: "b\nc"},
		"EmptyLinesCount":      {content: "a\n\n\n", lines: 2, want: "\n\n"},
		"SingleUnterminated":   {content: "abc", lines: 1, want: "abc"},
		"ZeroUnterminated":     {content: "abc", lines: 0, want: ""},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "log")
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			fh, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			off, err := tailOffset(fh, tc.lines)
			if err != nil {
				t.Fatalf("tailOffset: %v", err)
			}
			if diff := cmp.Diff(tc.want, tc.content[off:]); diff != "" {
				t.Errorf("last %d lines (-want +got):\n%s", tc.lines, diff)
			}
		})
	}
}

func TestNewKubeletServerRejects(t *testing.T) {
	dial := func(context.Context, string, string, int32) (net.Conn, error) { return nil, errors.New("unused") }
	for name, tc := range map[string]struct {
		cfg     KubeletServerConfig
		dial    func(context.Context, string, string, int32) (net.Conn, error)
		wantErr string
	}{
		"NoDial":  {cfg: KubeletServerConfig{}, wantErr: "dial function is nil"},
		"NoCert":  {cfg: KubeletServerConfig{}, dial: dial, wantErr: "serving certificate or key is empty"},
		"BadCert": {cfg: KubeletServerConfig{CertPEM: []byte("x"), KeyPEM: []byte("y")}, dial: dial, wantErr: "load serving certificate"},
		"BadPort": {cfg: KubeletServerConfig{Port: 70000}, dial: dial, wantErr: "port 70000 out of range"},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := NewKubeletServer(tc.cfg, tc.dial)
			if err == nil {
				_ = s.Close()
				t.Fatal("NewKubeletServer: no error")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewKubeletServer: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
