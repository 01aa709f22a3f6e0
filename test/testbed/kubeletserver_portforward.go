package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
)

// servePortForward is the kubelet's /portForward/{namespace}/{pod}[/{uid}]. The protocol work
// (SPDY streams, or the v4 WebSocket channels; the API server turns client-go's WebSocket
// tunnel into SPDY before it gets here) is the kubelet's own code from k8s.io/cri-streaming,
// which a container runtime's streaming server runs behind a real kubelet.
func (s *KubeletServer) servePortForward(w http.ResponseWriter, r *http.Request) {
	uid, ok := s.lookup(w, r)
	if !ok {
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fwd := podForwarder{s: s, namespace: r.PathValue("namespace")}
	portforward.ServePortForward(w, r, fwd, r.PathValue("pod"), uid, opts,
		s.cfg.StreamIdleTimeout, s.cfg.StreamCreationTimeout, portforward.SupportedProtocols)
}

// podForwarder connects one port-forward stream to a port of one pod of a namespace.
type podForwarder struct {
	s         *KubeletServer
	namespace string
}

// PortForward dials the pod and copies both ways. It returns when the pod side is done: the
// pod closed the connection, or the client's end of the stream ended and the pod answered that
// half-close by closing too. Its error reaches the client on the stream's error channel, which
// client-go reports and kubectl prints.
func (f podForwarder) PortForward(ctx context.Context, pod, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d of pod %s/%s out of range", port, f.namespace, pod)
	}
	dialCtx, cancel := context.WithTimeout(ctx, f.s.cfg.DialTimeout)
	conn, err := f.s.dial(dialCtx, f.namespace, pod, port)
	cancel()
	if err != nil {
		return fmt.Errorf("dial port %d of pod %s/%s: %w", port, f.namespace, pod, err)
	}
	if conn == nil {
		return fmt.Errorf("dial port %d of pod %s/%s: dial returned no connection", port, f.namespace, pod)
	}
	f.s.track(conn)
	defer f.s.untrack(conn)
	defer conn.Close()

	toPod := make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, stream)
		// The client will send nothing more: tell the pod, as a TCP client would.
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		toPod <- err
	}()
	_, fromPodErr := io.Copy(stream, conn)
	// Unblock the other copy if the client is still sending, then wait so no goroutine
	// outlives the stream: the client resets the stream once it has read our end of it, and a
	// client that does not is cut off by the connection's idle timeout or Close.
	_ = conn.Close()
	_ = stream.Close()
	<-toPod // a client-side write error after the pod is done is only the client hanging up
	if fromPodErr != nil && !isClosedErr(fromPodErr) {
		return fmt.Errorf("copy from port %d of pod %s/%s: %w", port, f.namespace, pod, fromPodErr)
	}
	return nil
}

// isClosedErr reports errors that only say one side hung up first.
func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe)
}
