package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
)

// Limits bound the work done on one input. The zero value means DefaultLimits.
type Limits struct {
	MaxBytes int // largest input accepted
	MaxCerts int // most certificates accepted from one input
}

// DefaultLimits are generous for real bundles (the Mozilla root store is ~150 certs, ~220 KiB)
// and still small enough that a hostile 50 MB file is refused before it is decoded.
var DefaultLimits = Limits{MaxBytes: 4 << 20, MaxCerts: 1000}

func (l Limits) orDefault() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxCerts <= 0 {
		l.MaxCerts = DefaultLimits.MaxCerts
	}
	return l
}

// ErrNoCertificates is returned when an input holds no certificate at all.
var ErrNoCertificates = errors.New("no certificate found")

// ErrTooLarge is returned when an input exceeds Limits.
var ErrTooLarge = errors.New("input exceeds size or count limit")

// ParseCertificates decodes every certificate in data, which may be a PEM bundle (many blocks,
// text or junk between them, CRLF line ends) or a single DER certificate. Non-certificate PEM
// blocks (keys, CRLs) are skipped without being decoded. A CERTIFICATE block that does not parse
// is an error naming its position, because a half-read bundle would hide a broken entry; so is a
// certificate block that encoding/pem would silently skip (truncated, bad base64, no END line).
func ParseCertificates(data []byte, lim Limits) ([]*x509.Certificate, error) {
	lim = lim.orDefault()
	if len(data) > lim.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, len(data), lim.MaxBytes)
	}
	if !bytes.Contains(data, []byte("-----BEGIN")) {
		if len(bytes.TrimSpace(data)) == 0 {
			return nil, ErrNoCertificates
		}
		c, err := x509.ParseCertificate(data)
		if err != nil {
			return nil, fmt.Errorf("not PEM, and not a DER certificate: %w", err)
		}
		return []*x509.Certificate{c}, nil
	}
	// pem.Decode skips a malformed block and returns the next good one, so count the certificate
	// BEGIN lines first and compare at the end.
	want := 0
	for _, l := range certBlockTypes {
		want += bytes.Count(data, []byte("-----BEGIN "+l+"-----"))
	}
	if want > lim.MaxCerts {
		return nil, fmt.Errorf("%w: %d certificate blocks > %d", ErrTooLarge, want, lim.MaxCerts)
	}
	certs := make([]*x509.Certificate, 0, want)
	rest := data
	for n := 1; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if !contains(certBlockTypes, block.Type) {
			continue
		}
		if len(certs) >= lim.MaxCerts {
			return nil, fmt.Errorf("%w: more than %d certificates", ErrTooLarge, lim.MaxCerts)
		}
		der := block.Bytes
		if block.Type == "TRUSTED CERTIFICATE" {
			// OpenSSL's trusted form appends trust settings after the certificate; keep only the
			// certificate itself.
			der = firstASN1Element(der)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d (%s): %w", n, block.Type, err)
		}
		certs = append(certs, c)
	}
	if len(certs) != want {
		return nil, fmt.Errorf("%d certificate PEM blocks found but %d decode: a block is truncated, has bad base64 or lacks its END line", want, len(certs))
	}
	if len(certs) == 0 {
		return nil, ErrNoCertificates
	}
	return certs, nil
}

// certBlockTypes are the PEM labels OpenSSL and BoringSSL (and so Envoy) read as certificates.
var certBlockTypes = []string{"CERTIFICATE", "TRUSTED CERTIFICATE", "X509 CERTIFICATE"}

// firstASN1Element returns the first DER element of b, or b when it does not parse (so that the
// caller's error names the real problem).
func firstASN1Element(b []byte) []byte {
	var v asn1.RawValue
	if _, err := asn1.Unmarshal(b, &v); err != nil {
		return b
	}
	return v.FullBytes
}

// KeyInfo describes a private key without holding it.
type KeyInfo struct {
	Public    crypto.PublicKey
	Algorithm string // "RSA", "ECDSA", "Ed25519"
	Format    string // "PKCS#1", "PKCS#8", "SEC1"
}

// ParsePrivateKey finds the first private key in data (PEM in PKCS#1, PKCS#8 or SEC1, or DER in
// any of them) and returns its public half. The private key itself is dropped before return, and
// errors never quote the input.
func ParsePrivateKey(data []byte, lim Limits) (KeyInfo, error) {
	lim = lim.orDefault()
	if len(data) > lim.MaxBytes {
		return KeyInfo{}, fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, len(data), lim.MaxBytes)
	}
	if !bytes.Contains(data, []byte("-----BEGIN")) {
		return parseKeyDER(data, "")
	}
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return KeyInfo{}, errors.New("no private key PEM block found")
		}
		switch block.Type {
		case "RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY":
			if len(block.Headers) > 0 && block.Headers["Proc-Type"] != "" {
				return KeyInfo{}, errors.New("encrypted PEM private keys are not supported")
			}
			return parseKeyDER(block.Bytes, block.Type)
		case "ENCRYPTED PRIVATE KEY":
			return KeyInfo{}, errors.New("encrypted PKCS#8 private keys are not supported")
		}
	}
}

func parseKeyDER(der []byte, pemType string) (KeyInfo, error) {
	try := []struct {
		format string
		types  []string
		parse  func([]byte) (any, error)
	}{
		{"PKCS#8", []string{"", "PRIVATE KEY"}, x509.ParsePKCS8PrivateKey},
		{"PKCS#1", []string{"", "RSA PRIVATE KEY"}, func(b []byte) (any, error) { return x509.ParsePKCS1PrivateKey(b) }},
		{"SEC1", []string{"", "EC PRIVATE KEY"}, func(b []byte) (any, error) { return x509.ParseECPrivateKey(b) }},
	}
	for _, t := range try {
		if !contains(t.types, pemType) {
			continue
		}
		k, err := t.parse(der)
		if err != nil {
			continue
		}
		// The public half is copied out rather than pointed into: &k.PublicKey would keep the
		// whole private key (D, RSA primes and precomputed values) reachable for as long as the
		// caller keeps the KeyInfo, which for an inventory is the life of the process.
		info := KeyInfo{Format: t.format}
		switch k := k.(type) {
		case *rsa.PrivateKey:
			info.Public, info.Algorithm = &rsa.PublicKey{N: new(big.Int).Set(k.N), E: k.E}, "RSA"
		case *ecdsa.PrivateKey:
			// Through the encoded point: a key that shares nothing with k, without the X and Y
			// fields Go 1.26 deprecates.
			b, err := k.PublicKey.Bytes()
			if err != nil {
				return KeyInfo{}, fmt.Errorf("ECDSA public key: %w", err)
			}
			pub, err := ecdsa.ParseUncompressedPublicKey(k.Curve, b)
			if err != nil {
				return KeyInfo{}, fmt.Errorf("ECDSA public key: %w", err)
			}
			info.Public, info.Algorithm = pub, "ECDSA"
		case ed25519.PrivateKey:
			// k.Public copies the 32 public bytes out of the 64-byte private key.
			info.Public, info.Algorithm = k.Public(), "Ed25519"
		default:
			return KeyInfo{}, fmt.Errorf("unsupported private key type %T", k)
		}
		return info, nil
	}
	if pemType != "" {
		return KeyInfo{}, fmt.Errorf("%s block does not hold a valid key", pemType)
	}
	return KeyInfo{}, errors.New("not a PEM or DER private key (PKCS#1, PKCS#8, SEC1)")
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// KeyMatches reports whether pub is the public key of cert.
func KeyMatches(cert *x509.Certificate, pub crypto.PublicKey) bool {
	if cert == nil || pub == nil {
		return false
	}
	k, ok := pub.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(cert.PublicKey)
}
