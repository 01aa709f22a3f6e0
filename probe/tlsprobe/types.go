// Package tlsprobe observes the served view: it completes a TLS handshake with an address and a
// chosen SNI and records the chain the server presented, whether or not it verifies. Judging the
// chain is the pki and audit packages' job.
package tlsprobe

import (
	"crypto/tls"
	"crypto/x509"
	"time"
)

// Target is one handshake to make.
type Target struct {
	Address string   // host:port
	SNI     string   // server name to send; "" sends none
	ALPN    []string // optional
	// ClientCert is presented when the server asks for one (mTLS listeners).
	ClientCert *tls.Certificate
	Timeout    time.Duration // whole dial + handshake; default 5s
}

// Result is what one handshake saw.
type Result struct {
	Target   Target
	Chain    []*x509.Certificate // as presented, leaf first
	Version  uint16
	ALPN     string
	Duration time.Duration
	// Err is set when no chain was received; Reason is a closed-set code for metrics
	// ("dial", "timeout", "handshake", "refused").
	Err    error
	Reason string
}
