package pki

import (
	"crypto/x509"
	"strings"
)

// CoversHost reports whether leaf is valid for host, an SNI name or an IP address, by its
// subject alternative names: DNS names with a single left-most wildcard label, and IP addresses.
// The subject CN is ignored, as Go (since 1.15) and browsers do; a certificate that relies on its
// CN would fail those clients, so reporting it is right.
func CoversHost(leaf *x509.Certificate, host string) bool {
	if leaf == nil {
		return false
	}
	h := strings.TrimSpace(host)
	// An SNI may be written as a fully qualified name; SANs never carry the root dot.
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return false
	}
	return leaf.VerifyHostname(h) == nil
}
