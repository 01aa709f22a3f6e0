package pki_test

import (
	"crypto/x509"

	"github.com/certdrift/certdrift/pki"
)

// fps is the fingerprints of cs, in order: what tests compare, since a diff of whole
// certificates is unreadable.
func fps(cs ...*x509.Certificate) []string {
	if len(cs) == 0 {
		return nil
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = pki.Fingerprint(c)
	}
	return out
}
