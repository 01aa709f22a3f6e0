package tlsprobe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/netbudget"
	"github.com/certdrift/certdrift/test/certs"
)

// server is a real in-process TLS listener on 127.0.0.1 that records what each handshake saw
// from its side.
type server struct {
	addr string
	mu   sync.Mutex
	seen []tls.ConnectionState
	errs []error
}

func (s *server) states() ([]tls.ConnectionState, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]tls.ConnectionState(nil), s.seen...), append([]error(nil), s.errs...)
}

func serveTLS(t *testing.T, cfg *tls.Config) *server {
	t.Helper()
	s := &server{}
	s.addr = serveTCP(t, func(c net.Conn) {
		tc := tls.Server(c, cfg)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		err := tc.Handshake()
		if err == nil {
			// In TLS 1.3 the server learns about a missing client certificate here, after
			// the client has already finished; wait for the client to go away.
			_, _ = tc.Read(make([]byte, 1))
		}
		s.mu.Lock()
		if err != nil {
			s.errs = append(s.errs, err)
		} else {
			s.seen = append(s.seen, tc.ConnectionState())
		}
		s.mu.Unlock()
	})
	return s
}

// serveTCP accepts connections on 127.0.0.1:0 and hands each to handle until the test ends.
func serveTCP(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

type fixture struct {
	root, inter *certs.Authority
	a, b, def   *certs.Leaf
	expired     *certs.Leaf
	client      *certs.Leaf
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	root := certs.NewCA(t)
	inter := root.Intermediate(t)
	return fixture{
		root: root, inter: inter,
		a:       inter.Leaf(t, certs.WithDNSNames("a.example.com")),
		b:       inter.Leaf(t, certs.WithDNSNames("b.example.com")),
		def:     inter.Leaf(t, certs.WithDNSNames("default.example.com")),
		expired: inter.Leaf(t, certs.WithDNSNames("old.example.com"), certs.Expired()),
		client:  root.Leaf(t, certs.WithCommonName("client"), certs.WithClientAuth()),
	}
}

// sniConfig serves a, b, expired by SNI and def otherwise, like an Envoy listener with one filter
// chain per server name.
func (f fixture) sniConfig() *tls.Config {
	byName := map[string]tls.Certificate{
		"a.example.com":   f.a.TLSCertificate(),
		"b.example.com":   f.b.TLSCertificate(),
		"old.example.com": f.expired.TLSCertificate(),
	}
	def := f.def.TLSCertificate()
	return &tls.Config{
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c, ok := byName[h.ServerName]; ok {
				return &c, nil
			}
			return &def, nil
		},
	}
}

func fingerprints(cs []*x509.Certificate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, pki.Fingerprint(c))
	}
	return out
}

func TestProbeServedChains(t *testing.T) {
	f := newFixture(t)
	srv := serveTLS(t, f.sniConfig())
	chain := func(l *certs.Leaf) []string { return fingerprints(l.Chain()) }

	cases := []struct {
		name, reason string
		target       Target
		wantChain    []string
		wantALPN     string
	}{
		{name: "SNISelectsA", reason: "SNI a.example.com selects leaf A with its intermediate",
			target: Target{SNI: "a.example.com"}, wantChain: chain(f.a)},
		{name: "SNISelectsB", reason: "SNI b.example.com selects leaf B",
			target: Target{SNI: "b.example.com", ALPN: []string{"h2"}}, wantChain: chain(f.b), wantALPN: "h2"},
		{name: "NoSNIGetsDefault", reason: "no SNI gets the default certificate",
			target: Target{ALPN: []string{"http/1.1"}}, wantChain: chain(f.def), wantALPN: "http/1.1"},
		{name: "UnknownSNIGetsDefault", reason: "an unknown name falls back to the default",
			target: Target{SNI: "nope.example.com"}, wantChain: chain(f.def)},
		{name: "ExpiredStillCaptured", reason: "an expired leaf is evidence, not a probe failure",
			target: Target{SNI: "old.example.com"}, wantChain: chain(f.expired)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.target.Address = srv.addr
			res := Probe(context.Background(), tc.target)
			if res.Err != nil || res.Reason != "" || res.HandshakeErr != nil {
				t.Fatalf("%s: Err=%v Reason=%q HandshakeErr=%v", tc.reason, res.Err, res.Reason, res.HandshakeErr)
			}
			if d := cmp.Diff(tc.wantChain, fingerprints(res.Chain)); d != "" {
				t.Errorf("%s: chain (-want +got):\n%s", tc.reason, d)
			}
			if res.ALPN != tc.wantALPN {
				t.Errorf("%s: ALPN = %q, want %q", tc.reason, res.ALPN, tc.wantALPN)
			}
			if res.Version != tls.VersionTLS13 || res.CipherSuite == 0 {
				t.Errorf("%s: version %x suite %x, want TLS 1.3 and a suite", tc.reason, res.Version, res.CipherSuite)
			}
			if res.Duration <= 0 || res.Start.IsZero() || res.ClientCertRequested {
				t.Errorf("%s: Duration=%v Start=%v ClientCertRequested=%v", tc.reason, res.Duration, res.Start, res.ClientCertRequested)
			}
			if d := cmp.Diff(tc.target.SNI, res.Target.SNI); d != "" {
				t.Errorf("%s: Target not echoed: %s", tc.reason, d)
			}
		})
	}
}

func TestProbeMutualTLS(t *testing.T) {
	f := newFixture(t)
	clientCert := f.client.TLSCertificate()
	mtls := func(maxVersion uint16) *tls.Config {
		return &tls.Config{
			Certificates: []tls.Certificate{f.a.TLSCertificate()},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    certs.Pool(f.root),
			MaxVersion:   maxVersion,
		}
	}
	plain := &tls.Config{Certificates: []tls.Certificate{f.a.TLSCertificate()}}

	cases := []struct {
		name, reason      string
		cfg               *tls.Config
		clientCert        *tls.Certificate
		wantVersion       uint16
		wantRequested     bool
		wantHandshakeErr  bool
		wantServerSawCert bool
	}{
		{name: "TLS12NoClientCert", reason: "TLS 1.2 server aborts after sending its chain; the chain is kept",
			cfg: mtls(tls.VersionTLS12), wantVersion: tls.VersionTLS12, wantRequested: true, wantHandshakeErr: true},
		{name: "TLS13NoClientCert", reason: "TLS 1.3 client finishes before the server's alert; chain kept",
			cfg: mtls(tls.VersionTLS13), wantVersion: tls.VersionTLS13, wantRequested: true},
		{name: "ClientCertPresented", reason: "with a client certificate the mTLS handshake completes",
			cfg: mtls(tls.VersionTLS13), clientCert: &clientCert, wantVersion: tls.VersionTLS13, wantRequested: true, wantServerSawCert: true},
		{name: "ClientCertOnlyWhenAsked", reason: "a server that does not ask gets no client certificate",
			cfg: plain, clientCert: &clientCert, wantVersion: tls.VersionTLS13},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := serveTLS(t, tc.cfg)
			res := Probe(context.Background(), Target{Address: srv.addr, SNI: "a.example.com", ClientCert: tc.clientCert})
			if res.Err != nil || res.Reason != "" {
				t.Fatalf("%s: Err=%v Reason=%q, want the chain", tc.reason, res.Err, res.Reason)
			}
			if d := cmp.Diff(fingerprints(f.a.Chain()), fingerprints(res.Chain)); d != "" {
				t.Errorf("%s: chain (-want +got):\n%s", tc.reason, d)
			}
			if res.Version != tc.wantVersion {
				t.Errorf("%s: version %x, want %x", tc.reason, res.Version, tc.wantVersion)
			}
			if res.ClientCertRequested != tc.wantRequested {
				t.Errorf("%s: ClientCertRequested = %v, want %v", tc.reason, res.ClientCertRequested, tc.wantRequested)
			}
			if (res.HandshakeErr != nil) != tc.wantHandshakeErr {
				t.Errorf("%s: HandshakeErr = %v, want error: %v", tc.reason, res.HandshakeErr, tc.wantHandshakeErr)
			}
			// Wait for the server side to finish so that what it saw is recorded.
			deadline := time.Now().Add(5 * time.Second)
			var seen []tls.ConnectionState
			var errs []error
			for time.Now().Before(deadline) {
				if seen, errs = srv.states(); len(seen)+len(errs) > 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			sawCert := len(seen) == 1 && len(seen[0].PeerCertificates) == 1 && seen[0].PeerCertificates[0].Equal(f.client.Cert)
			if sawCert != tc.wantServerSawCert {
				t.Errorf("%s: server saw client cert = %v, want %v (states %d, errs %v)", tc.reason, sawCert, tc.wantServerSawCert, len(seen), errs)
			}
		})
	}
}

func TestProbeFailures(t *testing.T) {
	f := newFixture(t)

	closed := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	silent := func(t *testing.T) string {
		return serveTCP(t, func(c net.Conn) {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Read(make([]byte, 1<<16)) // swallow the ClientHello, never answer
			_, _ = c.Read(make([]byte, 1))
		})
	}
	garbage := func(t *testing.T) string {
		return serveTCP(t, func(c net.Conn) {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
		})
	}
	alpnOnly := func(t *testing.T) string {
		return serveTLS(t, &tls.Config{Certificates: []tls.Certificate{f.a.TLSCertificate()}, NextProtos: []string{"h2"}}).addr
	}

	cases := []struct {
		name, reason string
		addr         func(t *testing.T) string
		target       Target
		ctxTimeout   time.Duration
		wantReason   string
		maxDuration  time.Duration
	}{
		{name: "ClosedPort", reason: "nothing listens", addr: closed, wantReason: ReasonRefused, maxDuration: 2 * time.Second},
		{name: "SilentServer", reason: "accepts and never answers: the deadline covers the handshake",
			addr: silent, target: Target{Timeout: 300 * time.Millisecond}, wantReason: ReasonTimeout, maxDuration: 2 * time.Second},
		{name: "ContextShorterThanTimeout", reason: "the caller's deadline wins over Target.Timeout",
			addr: silent, target: Target{Timeout: time.Minute}, ctxTimeout: 300 * time.Millisecond, wantReason: ReasonTimeout, maxDuration: 2 * time.Second},
		{name: "GarbageServer", reason: "HTTP instead of TLS", addr: garbage, wantReason: ReasonHandshake, maxDuration: 2 * time.Second},
		{name: "NoCommonALPN", reason: "server insists on an ALPN the client does not offer (Go tolerates a lone http/1.1, hence acme-tls/1)",
			addr: alpnOnly, target: Target{ALPN: []string{"acme-tls/1"}}, wantReason: ReasonHandshake, maxDuration: 2 * time.Second},
		{name: "BadAddress", reason: "no port", addr: func(*testing.T) string { return "127.0.0.1" }, wantReason: ReasonDial, maxDuration: time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.ctxTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxTimeout)
				defer cancel()
			}
			tc.target.Address = tc.addr(t)
			res := Probe(ctx, tc.target)
			if res.Reason != tc.wantReason || res.Err == nil {
				t.Fatalf("%s: Reason=%q Err=%v, want reason %q", tc.reason, res.Reason, res.Err, tc.wantReason)
			}
			if len(res.Chain) != 0 {
				t.Errorf("%s: chain of %d certs on failure", tc.reason, len(res.Chain))
			}
			if res.Duration > tc.maxDuration {
				t.Errorf("%s: took %v, want at most %v", tc.reason, res.Duration, tc.maxDuration)
			}
			if tc.wantReason == ReasonTimeout && res.Duration < 250*time.Millisecond {
				t.Errorf("%s: timed out after %v, before the 300ms deadline", tc.reason, res.Duration)
			}
			if !contains(Reasons, res.Reason) {
				t.Errorf("Reason %q is not in Reasons", res.Reason)
			}
		})
	}
}

func TestProbeLegacyTLS10(t *testing.T) {
	f := newFixture(t)
	srv := serveTLS(t, &tls.Config{
		Certificates: []tls.Certificate{f.a.TLSCertificate()},
		MinVersion:   tls.VersionTLS10,
		MaxVersion:   tls.VersionTLS10,
	})
	res := Probe(context.Background(), Target{Address: srv.addr, SNI: "a.example.com"})
	if res.Err != nil {
		t.Fatalf("a TLS 1.0-only server must still be observed (to be reported as weak): %v", res.Err)
	}
	if res.Version != tls.VersionTLS10 || len(res.Chain) != 2 {
		t.Errorf("version %x with %d certs, want TLS 1.0 (%x) with 2", res.Version, len(res.Chain), tls.VersionTLS10)
	}
}

func TestProbeAllOrderAndConcurrency(t *testing.T) {
	f := newFixture(t)
	var inFlight, maxInFlight atomic.Int32
	cfg := f.sniConfig()
	inner := cfg.GetCertificate
	cfg.GetCertificate = func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(40 * time.Millisecond)
		return inner(h)
	}
	srv := serveTLS(t, cfg)
	refused := func() string {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		defer ln.Close()
		return ln.Addr().String()
	}()

	var targets []Target
	var want []string
	for i := 0; i < 12; i++ {
		switch i % 3 {
		case 0:
			targets, want = append(targets, Target{Address: srv.addr, SNI: "a.example.com"}), append(want, "a.example.com")
		case 1:
			targets, want = append(targets, Target{Address: srv.addr, SNI: "b.example.com"}), append(want, "b.example.com")
		default:
			targets, want = append(targets, Target{Address: refused}), append(want, ReasonRefused)
		}
	}
	const limit = 3
	results := ProbeAll(context.Background(), targets, limit)
	var got []string
	for i, r := range results {
		if r.Target.Address != targets[i].Address || r.Target.SNI != targets[i].SNI {
			t.Errorf("result %d is for %v, want %v", i, r.Target, targets[i])
		}
		if len(r.Chain) > 0 {
			got = append(got, r.Chain[0].DNSNames[0])
		} else {
			got = append(got, r.Reason)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("results out of order (-want +got):\n%s", d)
	}
	if m := maxInFlight.Load(); m > limit {
		t.Errorf("%d handshakes in flight, limit %d", m, limit)
	}
	t.Logf("max in flight: %d", maxInFlight.Load())
	if r := ProbeAll(context.Background(), nil, 0); len(r) != 0 {
		t.Errorf("ProbeAll(nil) = %d results", len(r))
	}
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// A handshake is paid from the network memory budget: with the budget held elsewhere it waits,
// then fails at its deadline naming the budget; once the budget is free the same probe succeeds
// and gives back what it held.
func TestProbeMemoryBudget(t *testing.T) {
	f := newFixture(t)
	s := serveTLS(t, f.sniConfig())
	b := netbudget.New(1 << 20)
	hog := b.Lease()
	if err := hog.Grow(context.Background(), b.Limit()); err != nil {
		t.Fatal(err)
	}
	r := Probe(context.Background(), Target{Address: s.addr, SNI: "a.example.com", Timeout: 300 * time.Millisecond, Budget: b})
	if !errors.Is(r.Err, netbudget.ErrExhausted) || r.Reason != ReasonTimeout || len(r.Chain) != 0 {
		t.Fatalf("probe under a spent budget: err %v, reason %q, %d certificates; want ErrExhausted, timeout, none", r.Err, r.Reason, len(r.Chain))
	}
	hog.Release()
	r = Probe(context.Background(), Target{Address: s.addr, SNI: "a.example.com", Timeout: 5 * time.Second, Budget: b})
	if r.Err != nil || len(r.Chain) == 0 {
		t.Fatalf("probe with budget: %v", r.Err)
	}
	if used, peak := b.Stats(); used != 0 || peak == 0 {
		t.Fatalf("budget after the probe: %d held, peak %d; want 0 held and a nonzero peak", used, peak)
	}
}

// The probe offers classical groups only (no ML-KEM key share to pay for); a server that takes
// only NIST curves still completes the handshake (after a HelloRetryRequest), and one that
// prefers the post-quantum hybrid settles on X25519.
func TestProbeKeyExchangeGroups(t *testing.T) {
	f := newFixture(t)
	for name, groups := range map[string][]tls.CurveID{
		"P256Only":     {tls.CurveP256},
		"PrefersMLKEM": {tls.X25519MLKEM768, tls.X25519},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := f.sniConfig()
			cfg.CurvePreferences = groups
			srv := serveTLS(t, cfg)
			r := Probe(context.Background(), Target{Address: srv.addr, SNI: "a.example.com"})
			if r.Err != nil || len(r.Chain) == 0 || pki.Fingerprint(r.Chain[0]) != pki.Fingerprint(f.a.Cert) {
				t.Fatalf("probe: err %v, chain %v", r.Err, fingerprints(r.Chain))
			}
			var seen []tls.ConnectionState
			for deadline := time.Now().Add(5 * time.Second); len(seen) == 0 && time.Now().Before(deadline); {
				// The server records the handshake once the client has gone away.
				time.Sleep(10 * time.Millisecond)
				seen, _ = srv.states()
			}
			if len(seen) != 1 || seen[0].CurveID == tls.X25519MLKEM768 || !slices.Contains(groups, seen[0].CurveID) {
				t.Errorf("server saw %d handshakes, group %v; want one, on a classical group the server allows", len(seen), seen)
			}
		})
	}
}
