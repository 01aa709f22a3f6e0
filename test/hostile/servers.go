// Package hostile proves certdrift's bounds against admins and TLS endpoints that misbehave on
// purpose (issue 15): loopback servers that hang, drip, send huge, gzip-bombed, deeply nested,
// key-bearing, 50,000-context and 500-certificate answers, and TLS endpoints that stall or send
// garbage. The tests run the real certdrift binary against them and assert each bound: peak RSS,
// no foreign key bytes in any output, connections and goroutines across serve rounds, series and
// table lines per Envoy.
package hostile

import (
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HugeBytes is what the huge and gzip-bombed admins send per response: far past the 16 MiB limit.
const HugeBytes = 100 << 20

// Admin is a loopback HTTP server playing an Envoy admin.
type Admin struct {
	URL string
	// Accepted and Open count TCP connections: every one accepted, and those not yet closed.
	Accepted, Open atomic.Int64
}

// serveAdmin starts h on 127.0.0.1 until the test ends.
func serveAdmin(t testing.TB, h http.Handler) *Admin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &Admin{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			a.Accepted.Add(1)
			a.Open.Add(1)
		case http.StateClosed, http.StateHijacked:
			a.Open.Add(-1)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return a
}

// Huge answers every request with 200 and a JSON-looking body of HugeBytes, streamed without a
// Content-Length, until the client hangs up.
func Huge(t testing.TB) *Admin {
	chunk := bytes.Repeat([]byte("[1,2,3,4,5,6,7,8,9],"), 3277) // 64 KiB
	return serveAdmin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"certificates":[`))
		for sent := 0; sent < HugeBytes; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
}

var (
	bombOnce sync.Once
	bomb     []byte
)

// GzipBomb answers with a small gzip body that inflates to HugeBytes, so that a client decoding
// transparently (Go's transport does) sees 100 MB from ~100 KB on the wire.
func GzipBomb(t testing.TB) *Admin {
	bombOnce.Do(func() {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		_, _ = zw.Write([]byte(`{"certificates":[`))
		zeros := bytes.Repeat([]byte(" "), 1<<20)
		for range HugeBytes >> 20 {
			_, _ = zw.Write(zeros)
		}
		_ = zw.Close()
		bomb = b.Bytes()
	})
	return serveAdmin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(bomb)
	}))
}

// Hang accepts requests and never answers them.
func Hang(t testing.TB) *Admin {
	return serveAdmin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
}

// Drip sends a valid-looking body one byte every 50ms, forever.
func Drip(t testing.TB) *Admin {
	return serveAdmin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		f, _ := w.(http.Flusher)
		for _, c := range []byte(`{"certificates":[` + strings.Repeat(" ", 1<<20)) {
			if _, err := w.Write([]byte{c}); err != nil {
				return
			}
			if f != nil {
				f.Flush()
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}))
}

// Nested answers with JSON nested 2 million arrays deep.
func Nested(t testing.TB) *Admin {
	body := []byte(`{"certificates":` + strings.Repeat("[", 2<<20))
	return serveAdmin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
}

// ForeignKey is the hostile admin's own private key, in the encodings it echoes.
type ForeignKey struct {
	DER []byte
	PEM string
}

// NewForeignKey mints a P-256 key in PKCS#8.
func NewForeignKey(t testing.TB) ForeignKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return ForeignKey{DER: der, PEM: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))}
}

// Leaks reports whether out holds 12 consecutive bytes of the key's DER or 16 consecutive
// characters of its base64 (standard or URL) or hex (either case) forms. It says where, never what.
func (k ForeignKey) Leaks(out string) (bool, string) {
	forms := map[string]string{
		"der": string(k.DER), "base64": base64.StdEncoding.EncodeToString(k.DER),
		"base64url": base64.RawURLEncoding.EncodeToString(k.DER),
		"hex":       hex.EncodeToString(k.DER), "HEX": strings.ToUpper(hex.EncodeToString(k.DER)),
	}
	for name, f := range forms {
		w := 16
		if name == "der" {
			w = 12
		}
		for i := 0; i+w <= len(f); i++ {
			if j := strings.Index(out, f[i:i+w]); j >= 0 {
				return true, fmt.Sprintf("%d characters of the key's %s form at byte %d of the output, in %q (letters and digits masked)", w, name, j, mask(out[max(0, j-60):min(len(out), j+40)]))
			}
		}
	}
	return false, ""
}

// KeyErrors answers every endpoint with an error status whose body is the key in another
// encoding: PEM (503 on /certs), bare base64 (500 on /config_dump), hex (404 on /stats), JSON-escaped
// PEM lines (502 on /server_info) — what a misconfigured proxy in front of an admin might echo.
func KeyErrors(t testing.TB, k ForeignKey) *Admin {
	b64 := base64.StdEncoding.EncodeToString(k.DER)
	lines := strings.Split(strings.TrimSpace(k.PEM), "\n")
	return serveAdmin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/certs":
			http.Error(w, "upstream said: "+k.PEM, http.StatusServiceUnavailable)
		case "/config_dump":
			http.Error(w, "key="+b64, http.StatusInternalServerError)
		case "/stats":
			http.Error(w, "k "+hex.EncodeToString(k.DER), http.StatusNotFound)
		default:
			http.Error(w, `{"k":"`+strings.Join(lines[1:len(lines)-1], `\n`)+`"}`, http.StatusBadGateway)
		}
	}))
}

// KeyFields answers 200 with the key where names and values go: /certs serial_number and path,
// SANs, a secret's name, the server version, and a body that is not JSON at all.
func KeyFields(t testing.TB, k ForeignKey) *Admin {
	b64 := base64.StdEncoding.EncodeToString(k.DER)
	hx := hex.EncodeToString(k.DER)
	certs := fmt.Sprintf(`{"certificates":[{"ca_cert":[{"path":%q,"serial_number":%q,"expiration_time":"2030-01-01T00:00:00Z"}],`+
		`"cert_chain":[{"path":"/etc/tls/%s.crt","serial_number":%q,"subject_alt_names":[{"dns":%q},{"uri":%q}],"expiration_time":"2030-01-01T00:00:00Z"}]}]}`,
		k.PEM, b64, b64, hx, b64, "spiffe://x/"+hx)
	return serveAdmin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/certs":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, certs)
		case "/config_dump":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"configs":[{"@type":"type.googleapis.com/envoy.admin.v3.SecretsConfigDump","dynamic_active_secrets":[{"name":%q,"secret":{"@type":"type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret","name":%q,"tls_certificate":{"certificate_chain":{"inline_bytes":%q}}}}]}]}`,
				b64, b64, base64.StdEncoding.EncodeToString([]byte(k.PEM)))
		case "/stats":
			fmt.Fprint(w, string(k.DER)+"\n"+b64+": 1\n")
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"version":"x/%s/Clean","uptime_current_epoch":%q}`, b64, hx)
		}
	}))
}

// Contexts answers /certs with n TLS contexts, each with its own certificate entry, and the other
// endpoints with empty but valid answers.
func Contexts(t testing.TB, n int) *Admin {
	var b strings.Builder
	b.WriteString(`{"certificates":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"ca_cert":[],"cert_chain":[{"path":"/etc/tls/c%d.crt","serial_number":"%x","subject_alt_names":[{"dns":"h%d.example.com"}],"valid_from":"2025-01-01T00:00:00Z","expiration_time":"2030-01-01T00:00:00Z","days_until_expiration":"1000"}]}`, i, i+1, i)
	}
	b.WriteString(`]}`)
	body := b.String()
	return serveAdmin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/certs":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		default:
			Empty(w, r)
		}
	}))
}

// Empty answers as an Envoy with no TLS at all.
func Empty(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/certs":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"certificates":[]}`)
	case "/config_dump":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"configs":[]}`)
	case "/stats":
		fmt.Fprint(w, "server.live: 1\n")
	case "/server_info":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"version":"abc/1.40.0/Clean/RELEASE/BoringSSL","uptime_current_epoch":"100s"}`)
	default:
		http.NotFound(w, r)
	}
}

// Quiet is a well-behaved admin with nothing loaded.
func Quiet(t testing.TB) *Admin { return serveAdmin(t, http.HandlerFunc(Empty)) }

// serveTCP accepts on 127.0.0.1 and hands each connection to handle until the test ends.
func serveTCP(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return ln.Addr().String()
}

// StallTLS accepts and never says a word.
func StallTLS(t testing.TB) string {
	return serveTCP(t, func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		_, _ = c.Read(make([]byte, 1<<16))
		time.Sleep(time.Minute)
	})
}

// GarbageTLS answers a ClientHello with the key's DER and random bytes, and no TLS at all.
func GarbageTLS(t testing.TB, k ForeignKey) string {
	return serveTCP(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 1<<16))
		junk := make([]byte, 4096)
		_, _ = rand.Read(junk)
		_, _ = c.Write(append(append([]byte{}, k.DER...), junk...))
	})
}

// LongChainTLS serves a leaf followed by n-1 more certificates, each signed by the next, all
// expired an hour ago (so that each could be a finding of its own).
func LongChainTLS(t testing.TB, n int) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// One key for the whole chain keeps minting 500 certificates fast; the chain is what matters.
	var chain [][]byte
	notAfter := time.Now().Add(-time.Hour)
	for i := range n {
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 1)),
			Subject:      pkix.Name{CommonName: fmt.Sprintf("chain-%d", i)},
			Issuer:       pkix.Name{CommonName: fmt.Sprintf("chain-%d", i+1)},
			NotBefore:    time.Now().Add(-48 * time.Hour), NotAfter: notAfter,
			IsCA: i > 0, BasicConstraintsValid: true,
		}
		if i == 0 {
			tmpl.DNSNames = []string{"long.example.com"}
		}
		parent := &x509.Certificate{Subject: pkix.Name{CommonName: fmt.Sprintf("chain-%d", i+1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, der)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: chain, PrivateKey: key}}}
	return serveTCP(t, func(c net.Conn) {
		tc := tls.Server(c, cfg)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		_ = tc.Handshake()
		_, _ = tc.Read(make([]byte, 1))
	})
}

// mask hides letters and digits (and any byte that is not printable ASCII), so the context of a
// leak can be shown without showing the leak.
func mask(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c < 0x20 || c > 0x7e {
			b[i] = '*'
		}
	}
	return string(b)
}
