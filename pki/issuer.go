package pki

import (
	"bytes"
	"crypto/x509"
)

// IssuedBy reports whether parent's key signed child. The issuer/subject names must match too
// (a cheap filter that also rules out a key reused by two differently named CAs), but the answer
// rests on the signature, because a rotated CA keeps its name and changes its key: "same issuer
// name" is exactly the mistake CA_BUNDLE_GAP exists to catch.
//
// SHA-1 signatures are accepted here on purpose: this answers "who issued it", not "should it be
// trusted" (WeakCrypto and Verify say that). MD5 signatures are not checkable and return false.
func IssuedBy(child, parent *x509.Certificate) bool {
	if child == nil || parent == nil {
		return false
	}
	if !bytes.Equal(child.RawIssuer, parent.RawSubject) {
		return false
	}
	return parent.CheckSignature(child.SignatureAlgorithm, child.RawTBSCertificate, child.Signature) == nil
}

// SelfSigned reports whether c is signed by its own key under its own name (a root, or a
// self-signed leaf).
func SelfSigned(c *x509.Certificate) bool {
	return IssuedBy(c, c)
}
