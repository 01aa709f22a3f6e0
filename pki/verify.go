package pki

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Reason is why a verification failed: a closed set, so it can be a metric label or a JSON
// value.
type Reason string

// Verification failure reasons.
const (
	ReasonNone             Reason = ""
	ReasonNoRoots          Reason = "no_roots"          // the bundle holds no certificate
	ReasonUnknownAuthority Reason = "unknown_authority" // no certificate in the bundle signed the chain
	ReasonExpired          Reason = "expired"           // a chain exists, but a certificate on it has expired
	ReasonNotYetValid      Reason = "not_yet_valid"     // a chain exists, but a certificate on it is not valid yet
	ReasonInsecureSig      Reason = "insecure_signature"
	ReasonIncompatibleUse  Reason = "incompatible_usage" // extended key usage forbids the asked use
	ReasonOther            Reason = "other"              // name constraints, path length, and so on
)

// VerifyResult tells whether a bundle trusts a leaf and, either way, why.
type VerifyResult struct {
	OK bool
	// Chain is the chain found, leaf first and root last. When verification failed only because
	// of time or signature algorithm, it is the chain that would have verified.
	Chain []*x509.Certificate
	// RootIndex is the position in roots of the root that verified (or would have), -1 if none.
	RootIndex int
	// RootFingerprint is that root's SHA-256 fingerprint.
	RootFingerprint string
	// RootIndexes lists every root in the bundle that verifies the leaf (e.g. both an old and a
	// cross-signed new CA), lowest first.
	RootIndexes []int
	Reason      Reason
	// Problem is the certificate that caused Reason (the expired one, say), when known.
	Problem *x509.Certificate
	// Err is crypto/x509's error, wrapped with what was tried; nil when OK.
	Err error
}

// maxChainDepth bounds the fallback chain search on hostile bundles (and loops between
// cross-signed CAs).
const maxChainDepth = 8

// maxSignatureChecks bounds the signature checks of one fallback search.
const maxSignatureChecks = 2000

// Verify checks leaf against the trust bundle roots at time at, for usage (x509.ExtKeyUsageAny to
// ignore usage), using intermediates as needed.
//
// It uses crypto/x509 rather than cfssl's bundler: the bundler builds chains for serving (it
// fetches missing intermediates over the network and ranks roots by ubiquity), while certdrift
// needs an offline answer against one given bundle at an injected time, plus which entry of that
// bundle did the work. When x509 says no, a signature-only search over the same certificates tells
// "no CA in this bundle issued it" (a CA_BUNDLE_GAP) apart from "the issuer is there but expired".
func Verify(leaf *x509.Certificate, intermediates, roots []*x509.Certificate, at time.Time, usage x509.ExtKeyUsage) VerifyResult {
	res := VerifyResult{RootIndex: -1}
	if leaf == nil {
		res.Reason, res.Err = ReasonOther, errors.New("no leaf certificate to verify")
		return res
	}
	// roots keeps its nil entries so that RootIndex is a position in the caller's slice.
	intermediates = nonNil(intermediates)
	if len(nonNil(roots)) == 0 {
		res.Reason, res.Err = ReasonNoRoots, errors.New("trust bundle is empty")
		return res
	}
	rootPool, interPool := x509.NewCertPool(), x509.NewCertPool()
	for _, r := range roots {
		if r != nil {
			rootPool.AddCert(r)
		}
	}
	for _, c := range intermediates {
		interPool.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots: rootPool, Intermediates: interPool, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{usage},
	})
	if err == nil && len(chains) > 0 {
		res.OK = true
		res.chooseChain(chains, roots)
		return res
	}
	res.Err = fmt.Errorf("verify %q against a bundle of %d CA(s) at %s: %w",
		leaf.Subject.String(), len(nonNil(roots)), at.UTC().Format(time.RFC3339), err)
	res.classify(err, leaf, intermediates, roots, at)
	return res
}

// chooseChain picks the shortest chain, then the lowest root index, as "the" chain, and records
// every root that verified.
func (res *VerifyResult) chooseChain(chains [][]*x509.Certificate, roots []*x509.Certificate) {
	best := -1
	seen := map[int]bool{}
	for i, ch := range chains {
		idx := indexOf(roots, ch[len(ch)-1])
		if idx >= 0 && !seen[idx] {
			seen[idx] = true
			res.RootIndexes = append(res.RootIndexes, idx)
		}
		if best < 0 || len(ch) < len(chains[best]) ||
			(len(ch) == len(chains[best]) && idx < res.RootIndex) {
			best, res.RootIndex = i, idx
		}
	}
	slices.Sort(res.RootIndexes)
	res.Chain = chains[best]
	if res.RootIndex >= 0 {
		res.RootFingerprint = Fingerprint(roots[res.RootIndex])
	}
}

func (res *VerifyResult) classify(err error, leaf *x509.Certificate, intermediates, roots []*x509.Certificate, at time.Time) {
	var inv x509.CertificateInvalidError
	if errors.As(err, &inv) {
		switch inv.Reason {
		case x509.Expired:
			// x509 reports the leaf's own validity this way, before looking for a chain.
			res.Reason, res.Problem = timeReason(inv.Cert, at), inv.Cert
			res.findChain(leaf, intermediates, roots)
			return
		case x509.IncompatibleUsage:
			res.Reason, res.Problem = ReasonIncompatibleUse, inv.Cert
			res.findChain(leaf, intermediates, roots)
			return
		}
		res.Reason, res.Problem = ReasonOther, inv.Cert
		return
	}
	var ins x509.InsecureAlgorithmError
	if errors.As(err, &ins) {
		res.Reason = ReasonInsecureSig
		res.findChain(leaf, intermediates, roots)
		return
	}
	// Unknown authority, or anything else: x509 skipped candidates that were expired or signed
	// with SHA-1 and only says it found none. Find out by signature alone.
	res.Reason = ReasonUnknownAuthority
	if !res.findChain(leaf, intermediates, roots) {
		return
	}
	for _, c := range res.Chain {
		if r := timeReason(c, at); r != ReasonNone {
			res.Reason, res.Problem = r, c
			return
		}
	}
	for _, c := range res.Chain[:len(res.Chain)-1] {
		if insecureSigAlgs[c.SignatureAlgorithm] {
			res.Reason, res.Problem = ReasonInsecureSig, c
			return
		}
	}
	res.Reason = ReasonOther
}

// findChain searches leaf → intermediates → a root by signature only (ignoring time, usage and
// signature strength), records the first chain found and its root, and reports whether it found
// one.
func (res *VerifyResult) findChain(leaf *x509.Certificate, intermediates, roots []*x509.Certificate) bool {
	path := []*x509.Certificate{leaf}
	// dead remembers intermediates that led nowhere, and budget caps signature checks, so that a
	// hostile bundle of mutually signed certificates cannot make the search exponential.
	dead := map[*x509.Certificate]bool{}
	budget := maxSignatureChecks
	issued := func(c, p *x509.Certificate) bool {
		if budget <= 0 {
			return false
		}
		budget--
		return IssuedBy(c, p)
	}
	var walk func(c *x509.Certificate) bool
	walk = func(c *x509.Certificate) bool {
		for i, r := range roots {
			if r == nil {
				continue
			}
			if bytes.Equal(c.Raw, r.Raw) || issued(c, r) {
				if !bytes.Equal(c.Raw, r.Raw) {
					path = append(path, r)
				}
				res.Chain = append([]*x509.Certificate(nil), path...)
				res.RootIndex, res.RootFingerprint = i, Fingerprint(r)
				res.RootIndexes = []int{i}
				return true
			}
		}
		if len(path) >= maxChainDepth {
			return false
		}
		for _, in := range intermediates {
			if dead[in] || inPath(path, in) || !issued(c, in) {
				continue
			}
			path = append(path, in)
			if walk(in) {
				return true
			}
			path = path[:len(path)-1]
			dead[in] = true
		}
		return false
	}
	return walk(leaf)
}

func timeReason(c *x509.Certificate, at time.Time) Reason {
	switch {
	case c == nil:
		return ReasonNone
	case at.Before(c.NotBefore):
		return ReasonNotYetValid
	case at.After(c.NotAfter):
		return ReasonExpired
	}
	return ReasonNone
}

func inPath(path []*x509.Certificate, c *x509.Certificate) bool {
	for _, p := range path {
		if bytes.Equal(p.Raw, c.Raw) {
			return true
		}
	}
	return false
}

func indexOf(certs []*x509.Certificate, c *x509.Certificate) int {
	for i, x := range certs {
		if x != nil && bytes.Equal(x.Raw, c.Raw) {
			return i
		}
	}
	return -1
}

func nonNil(cs []*x509.Certificate) []*x509.Certificate {
	out := cs[:0:0]
	for _, c := range cs {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}
