package pki

import (
	"crypto/x509"
	"fmt"
	"time"
)

// BundleIssueKind names a trust-bundle hygiene problem.
type BundleIssueKind string

// Bundle hygiene issues.
const (
	BundleExpired     BundleIssueKind = "expired"
	BundleNotYetValid BundleIssueKind = "not_yet_valid"
	BundleDuplicate   BundleIssueKind = "duplicate"
	BundleTooMany     BundleIssueKind = "too_many"
	BundleNotCA       BundleIssueKind = "not_a_ca"
)

// BundleIssue is one hygiene problem. Index is the position in the bundle of the certificate
// concerned (-1 for TooMany, which is about the whole bundle).
type BundleIssue struct {
	Kind        BundleIssueKind `json:"kind"`
	Index       int             `json:"index"`
	Fingerprint string          `json:"fingerprint_sha256,omitempty"`
	Message     string          `json:"message"`
}

// CheckBundle reports expired and not-yet-valid CAs, duplicates (same fingerprint), entries that
// are not CA certificates, and more distinct CAs than maxCAs (0 or less: no limit). A rotation
// needs at most two CAs at once (Envoy Gateway's [newCA, oldCA]); more usually means nobody
// removes old ones.
//
// An expired CA is reported even though it is harmless to clients that also hold the new one:
// it signals a rotation that was never finished, and a peer that depends on it is already broken.
func CheckBundle(bundle []*x509.Certificate, at time.Time, maxCAs int) []BundleIssue {
	var out []BundleIssue
	seen := map[string]int{}
	distinct := 0
	for i, c := range bundle {
		if c == nil {
			continue
		}
		fp := Fingerprint(c)
		if j, ok := seen[fp]; ok {
			out = append(out, BundleIssue{Kind: BundleDuplicate, Index: i, Fingerprint: fp,
				Message: fmt.Sprintf("certificate %d (%s) duplicates certificate %d", i, name(c), j)})
			continue
		}
		seen[fp] = i
		distinct++
		switch timeReason(c, at) {
		case ReasonExpired:
			out = append(out, BundleIssue{Kind: BundleExpired, Index: i, Fingerprint: fp,
				Message: fmt.Sprintf("CA %d (%s) expired at %s", i, name(c), c.NotAfter.UTC().Format(time.RFC3339))})
		case ReasonNotYetValid:
			out = append(out, BundleIssue{Kind: BundleNotYetValid, Index: i, Fingerprint: fp,
				Message: fmt.Sprintf("CA %d (%s) is not valid before %s", i, name(c), c.NotBefore.UTC().Format(time.RFC3339))})
		}
		if !c.IsCA {
			out = append(out, BundleIssue{Kind: BundleNotCA, Index: i, Fingerprint: fp,
				Message: fmt.Sprintf("certificate %d (%s) is not a CA (no basicConstraints CA:TRUE); a trust bundle should hold only CAs", i, name(c))})
		}
	}
	if maxCAs > 0 && distinct > maxCAs {
		out = append(out, BundleIssue{Kind: BundleTooMany, Index: -1,
			Message: fmt.Sprintf("bundle holds %d distinct CAs, more than the %d allowed", distinct, maxCAs)})
	}
	return out
}
