package tlsprobe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/certdrift/certdrift/probe/netbudget"
)

// DefaultTimeout bounds one probe (dial and handshake together) when Target.Timeout is unset.
const DefaultTimeout = 5 * time.Second

// Failure reasons: a closed set, so they can be metric label values.
const (
	ReasonRefused       = "refused"        // TCP connection refused: nothing listens
	ReasonTimeout       = "timeout"        // the deadline passed during dial or handshake
	ReasonDial          = "dial"           // any other dial failure (bad address, no route, DNS)
	ReasonHandshake     = "handshake"      // TLS failed before the server's certificate arrived
	ReasonNoCertificate = "no_certificate" // the handshake completed without a certificate
)

// Reasons lists every Reason value, for pre-declaring metric series.
var Reasons = []string{ReasonRefused, ReasonTimeout, ReasonDial, ReasonHandshake, ReasonNoCertificate}

// capture keeps what the client learned during the handshake, so that it survives a handshake
// that fails after the server's Certificate message.
type capture struct {
	mu        sync.Mutex
	chain     []*x509.Certificate
	version   uint16
	alpn      string
	suite     uint16
	requested bool
}

// Probe completes one TLS handshake with t.Address and records the chain the server presented.
// It does not verify the chain: an expired, self-signed or wrong-host certificate is exactly
// what certdrift needs to see. ctx and t.Timeout (default 5s) together bound the whole probe.
func Probe(ctx context.Context, t Target) (res Result) {
	res = Result{Target: t, Start: time.Now()}
	defer func() { res.Duration = time.Since(res.Start) }()

	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	if _, _, err := net.SplitHostPort(t.Address); err != nil {
		res.Err, res.Reason = fmt.Errorf("probe %q: %w", t.Address, err), ReasonDial
		return res
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", t.Address)
	if err != nil {
		res.Err, res.Reason = fmt.Errorf("dial %s: %w", t.Address, err), dialReason(ctx, err)
		return res
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		// HandshakeContext also watches ctx; the conn deadline makes every read and write of the
		// handshake give up at the same instant even if the context watcher is slow to run.
		_ = conn.SetDeadline(dl)
	}

	// What the server sends is paid from the process's network memory budget (its Certificate
	// message alone may be 256 KiB, and many handshakes run at once); a handshake that cannot get
	// budget within its deadline fails like any other. Three times the bytes read: each
	// certificate's DER is kept in x509.Certificate.Raw next to its parsed fields.
	lease := netbudget.Or(t.Budget).Lease()
	defer lease.Release()
	c := &capture{}
	bc := netbudget.NewConn(ctx, conn, lease, 3)
	tc := tls.Client(bc, config(t, c))
	herr := tc.HandshakeContext(ctx)

	c.mu.Lock()
	res.Chain, res.Version, res.ALPN, res.CipherSuite = c.chain, c.version, c.alpn, c.suite
	res.ClientCertRequested = c.requested
	c.mu.Unlock()
	if herr == nil {
		cs := tc.ConnectionState()
		res.Chain, res.Version, res.ALPN, res.CipherSuite = cs.PeerCertificates, cs.Version, cs.NegotiatedProtocol, cs.CipherSuite
	}

	switch {
	case herr != nil && len(res.Chain) > 0:
		res.HandshakeErr = fmt.Errorf("tls handshake with %s (sni %q) after the server's certificate: %w", t.Address, t.SNI, herr)
	case herr != nil:
		res.Err = fmt.Errorf("tls handshake with %s (sni %q): %w", t.Address, t.SNI, herr)
		res.Reason = ReasonHandshake
		if berr := bc.Err(); berr != nil {
			res.Err = fmt.Errorf("tls handshake with %s (sni %q): %w", t.Address, t.SNI, berr)
		}
		if isTimeout(ctx, herr) {
			res.Reason = ReasonTimeout
		}
	case len(res.Chain) == 0:
		res.Err = fmt.Errorf("tls handshake with %s (sni %q): server presented no certificate", t.Address, t.SNI)
		res.Reason = ReasonNoCertificate
	}
	return res
}

func config(t Target, c *capture) *tls.Config {
	return &tls.Config{
		ServerName: t.SNI,
		NextProtos: t.ALPN,
		// No ClientSessionCache, on purpose: a resumed session carries the certificate of the
		// handshake it resumes, and the served view must be what the server sends now. Each
		// probe's connection is closed when it returns, so nothing piles up across rounds.
		// The probe observes; pki judges. Verification would hide exactly the broken chains
		// certdrift exists to report.
		InsecureSkipVerify: true, //nolint:gosec // chain is captured and verified by pki
		// Old servers must still be seen (and reported as weak), so accept every version and
		// suite Go implements rather than Go's safer client defaults.
		MinVersion:   tls.VersionTLS10,
		CipherSuites: suites,
		// Classical groups only. Go's default offers X25519MLKEM768 (and the SecP*MLKEM hybrids)
		// first, and the client pays for an ML-KEM key pair and decapsulation in every handshake
		// (issue 20: a third of the client's CPU per probe). The key exchange decides nothing the
		// served view records: the server picks its certificate by SNI and signature algorithms.
		// Go ignores this list's order and sends one key share, X25519 (P-256 if a server takes
		// only NIST curves: one HelloRetryRequest, still a full handshake).
		CurvePreferences: classicalGroups,
		// Called when the server's Certificate message arrives, before this client sends its
		// own certificate: the chain is kept even if the server then aborts the handshake.
		VerifyConnection: func(cs tls.ConnectionState) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.chain, c.version, c.alpn, c.suite = cs.PeerCertificates, cs.Version, cs.NegotiatedProtocol, cs.CipherSuite
			return nil
		},
		// GetClientCertificate (not Certificates) so the certificate goes only to servers that
		// ask for it, and so we learn that they asked.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c.mu.Lock()
			c.requested = true
			c.mu.Unlock()
			if t.ClientCert != nil {
				return t.ClientCert, nil
			}
			return &tls.Certificate{}, nil // send none
		},
	}
}

// suites and classicalGroups are shared by every probe's tls.Config (read-only).
var (
	suites          = allSuites()
	classicalGroups = []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521}
)

func allSuites() []uint16 {
	var ids []uint16
	for _, s := range tls.CipherSuites() {
		ids = append(ids, s.ID)
	}
	for _, s := range tls.InsecureCipherSuites() {
		ids = append(ids, s.ID)
	}
	return ids
}

func dialReason(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonRefused
	case isTimeout(ctx, err):
		return ReasonTimeout
	default:
		return ReasonDial
	}
}

func isTimeout(ctx context.Context, err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ProbeAll probes every target with at most concurrency probes in flight (1 if concurrency < 1)
// and returns the results in the order of targets.
func ProbeAll(ctx context.Context, targets []Target, concurrency int) []Result {
	if concurrency < 1 {
		concurrency = 1
	}
	results := make([]Result, len(targets))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, t := range targets {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = Probe(ctx, t)
		}()
	}
	wg.Wait()
	return results
}
