package desired

import (
	"crypto/x509"

	"github.com/certdrift/certdrift/pki"
)

// Candidate is what a source would hold after a planned rotation (certdrift preflight): a new
// leaf with its chain, a new CA bundle, or both. It names the source the way the desired view
// does (Observation.Ref's String()), so the judgement can find who loads it today. Of a private
// key only the public half is kept (pki.KeyInfo), as for the desired view: enough to tell
// whether Envoy would accept the pair.
type Candidate struct {
	// Source and Item name the desired certificate the candidate replaces.
	Source, Item string
	// From says where the candidate was read ("leaf.pem", "secret.yaml tls.crt"), for messages.
	From string
	// Chain is the new leaf first, then its intermediates; nil when the leaf does not change.
	Chain []*x509.Certificate
	// Bundle is the new CA bundle; nil when the bundle does not change.
	Bundle []*x509.Certificate
	// Key is the public half of the private key given with the leaf (a Secret manifest's
	// tls.key); nil when none was given or it did not parse (KeyErr).
	Key    *pki.KeyInfo
	KeyErr error
}
