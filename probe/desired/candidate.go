package desired

import "crypto/x509"

// Candidate is what a source would hold after a planned rotation (certdrift preflight): a new
// leaf with its chain, a new CA bundle, or both. It names the source the way the desired view
// does (Observation.Ref's String()), so the judgement can find who loads it today. No key: a
// preflight judges trust, and the key never leaves the place it was read from.
type Candidate struct {
	// Source and Item name the desired certificate the candidate replaces.
	Source, Item string
	// From says where the candidate was read ("leaf.pem", "secret.yaml tls.crt"), for messages.
	From string
	// Chain is the new leaf first, then its intermediates; nil when the leaf does not change.
	Chain []*x509.Certificate
	// Bundle is the new CA bundle; nil when the bundle does not change.
	Bundle []*x509.Certificate
}
