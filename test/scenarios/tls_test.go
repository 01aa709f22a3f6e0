package scenarios

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// dialTimeout bounds every dial and exchange with an Envoy.
const dialTimeout = 3 * time.Second

// maxBody bounds a response body read from an Envoy.
const maxBody = 1 << 20

// exchange is what one TLS connection to an Envoy showed.
type exchange struct {
	leaf   *x509.Certificate // the served leaf; set even when the handshake failed afterwards
	status int               // HTTP status of GET /, 0 when no response came
	body   string
	err    error // handshake, client-certificate rejection or HTTP error
}

// tlsGet connects to addr with plain crypto/tls (SNI sni, presenting client when not nil),
// records the served leaf without verifying it (the scenarios compare certificates; trust is
// what Envoy decides), and sends GET / over HTTP/1.1. With TLS 1.3 a server that rejects the
// client certificate says so only after the handshake, so the request is what proves that the
// connection was accepted.
func tlsGet(addr, sni string, client *tls.Certificate) exchange {
	var ex exchange
	cfg := &tls.Config{
		ServerName:         sni,
		InsecureSkipVerify: true, // the leaf is recorded and compared by the caller
		NextProtos:         []string{"http/1.1"},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) > 0 {
				ex.leaf, _ = x509.ParseCertificate(raw[0])
			}
			return nil
		},
	}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	d := &net.Dialer{Timeout: dialTimeout}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		ex.err = fmt.Errorf("TLS handshake with %s (SNI %q): %w", addr, sni, err)
		return ex
	}
	defer conn.Close()
	ex.status, ex.body, ex.err = httpGet(conn, "/")
	if ex.err != nil {
		ex.err = fmt.Errorf("GET / from %s (SNI %q): %w", addr, sni, ex.err)
	}
	return ex
}

// httpGet sends one HTTP/1.1 request over conn and reads the response.
func httpGet(conn net.Conn, path string) (int, string, error) {
	if err := conn.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
		return 0, "", err
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: scenario.test\r\nConnection: close\r\n\r\n", path); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	return resp.StatusCode, string(body), err
}

// plainGet sends GET path to addr over plain TCP on a new connection.
func plainGet(addr, path string) (int, string, error) {
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	return httpGet(conn, path)
}

// podGet sends GET path to port inside pod ns/name (its private localhost first), the way a
// port-forward reaches a localhost-only Envoy admin.
func podGet(ctx context.Context, ns, name string, port int, path string) (int, string, error) {
	conn, err := tb.DialPod(ctx, ns, name, port)
	if err != nil {
		return 0, "", fmt.Errorf("dial pod %s/%s port %d: %w", ns, name, port, err)
	}
	defer conn.Close()
	return httpGet(conn, path)
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// firstCert parses the first PEM certificate in data: what a Secret's tls.crt (or ca.crt)
// holds first.
func firstCert(t *testing.T, what string, data []byte) *x509.Certificate {
	t.Helper()
	certs := parseCerts(t, what, data)
	return certs[0]
}

// parseCerts parses every PEM certificate in data, failing the test when there is none.
func parseCerts(t *testing.T, what string, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("%s: parse certificate: %v", what, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no PEM certificate", what)
	}
	return out
}

// sameCert reports whether the served leaf is exactly want (byte for byte).
func sameCert(got, want *x509.Certificate) bool {
	return got != nil && want != nil && bytes.Equal(got.Raw, want.Raw)
}

// serial prints a certificate's serial for messages, "none" for nil.
func serial(c *x509.Certificate) string {
	if c == nil {
		return "none"
	}
	return c.SerialNumber.Text(16)
}

// servesErr is nil when ex shows want being served, else an error saying what was served.
func servesErr(ex exchange, want *x509.Certificate) error {
	if sameCert(ex.leaf, want) {
		return nil
	}
	return errors.Join(fmt.Errorf("serves serial %s, want %s", serial(ex.leaf), serial(want)), ex.err)
}
