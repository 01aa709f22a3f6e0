// Package tlsprobe observes the served view: it completes a TLS handshake with an address and a
// chosen SNI and records the chain the server presented, whether or not it verifies. Judging the
// chain is the pki and audit packages' job.
package tlsprobe

import (
	"crypto/tls"
	"crypto/x509"
	"time"

	"github.com/certdrift/certdrift/probe/netbudget"
)

// Target is one handshake to make.
type Target struct {
	Address string   // host:port
	SNI     string   // server name to send; "" sends none
	ALPN    []string // optional
	// ClientCert is presented when the server asks for one (mTLS listeners).
	ClientCert *tls.Certificate
	Timeout    time.Duration // whole dial + handshake; default 5s
	// Budget pays for what the server sends (nil: netbudget.Process(), shared by the whole
	// process).
	Budget *netbudget.Budget
}

// Result is what one handshake saw.
type Result struct {
	Target   Target
	Chain    []*x509.Certificate // as presented, leaf first
	Version  uint16
	ALPN     string
	Duration time.Duration
	// Err is set when no chain was received; Reason is a closed-set code for metrics, one of
	// Reasons ("refused", "timeout", "dial", "handshake", "no_certificate").
	Err    error
	Reason string

	// Start is when the probe began (the age of this observation).
	Start time.Time
	// CipherSuite is the negotiated suite (tls.CipherSuiteName names it); 0 if unknown.
	CipherSuite uint16
	// ClientCertRequested is true when the server sent a CertificateRequest (an mTLS listener).
	ClientCertRequested bool
	// HandshakeErr is set when the server's chain was received but the handshake failed after
	// that, typically a server that requires a client certificate and got none (TLS 1.2). Chain
	// is still what the server presents, so Err and Reason stay empty.
	HandshakeErr error
}
