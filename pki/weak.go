package pki

import (
	//lint:ignore SA1019 only to recognise DSA keys in certificates (WEAK_CRYPTO), never to use them
	"crypto/dsa"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
)

// DefaultMinRSABits is the smallest RSA modulus not reported as weak (NIST SP 800-131A).
const DefaultMinRSABits = 2048

// insecureSigAlgs are signature algorithms whose hash is broken for certificate signatures.
var insecureSigAlgs = map[x509.SignatureAlgorithm]bool{
	x509.MD2WithRSA:    true,
	x509.MD5WithRSA:    true,
	x509.SHA1WithRSA:   true,
	x509.DSAWithSHA1:   true,
	x509.ECDSAWithSHA1: true,
}

// WeakCrypto lists, one line each, what is weak about c: an RSA key below minRSABits (0 means
// DefaultMinRSABits), an EC key on a curve below P-256, a DSA key, a signature made with MD2, MD5
// or SHA-1, or a DSA signature.
//
// The signature of a self-signed certificate is not judged: nobody verifies a trust anchor's
// signature on itself, so a SHA-1 self-signed root is not a weakness a client is exposed to (its
// key size still is).
func WeakCrypto(c *x509.Certificate, minRSABits int) []string {
	if c == nil {
		return nil
	}
	if minRSABits <= 0 {
		minRSABits = DefaultMinRSABits
	}
	var out []string
	switch k := c.PublicKey.(type) {
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < minRSABits {
			out = append(out, fmt.Sprintf("RSA key of %d bits is below the minimum of %d", n, minRSABits))
		}
	case *ecdsa.PublicKey:
		if k.Curve == nil || k.Curve.Params() == nil {
			out = append(out, "EC key on an unknown curve")
		} else if n := k.Curve.Params().BitSize; n < 256 {
			out = append(out, fmt.Sprintf("EC key on curve %s (%d bits) is below P-256", k.Curve.Params().Name, n))
		}
	case *dsa.PublicKey:
		out = append(out, "DSA key (deprecated; not accepted by TLS 1.3 or BoringSSL)")
	}
	if c.PublicKeyAlgorithm == x509.DSA && c.PublicKey == nil {
		out = append(out, "DSA key (deprecated; not accepted by TLS 1.3 or BoringSSL)")
	}
	// SelfSigned accepts SHA-1 (CheckSignature allows it) but cannot check MD5, so an MD5
	// self-signed certificate is still reported, which errs on the side of telling.
	if !SelfSigned(c) {
		switch {
		case insecureSigAlgs[c.SignatureAlgorithm]:
			out = append(out, fmt.Sprintf("signature algorithm %s uses a broken hash", c.SignatureAlgorithm))
		case c.SignatureAlgorithm == x509.DSAWithSHA256:
			out = append(out, fmt.Sprintf("signature algorithm %s is deprecated", c.SignatureAlgorithm))
		}
	}
	return out
}
