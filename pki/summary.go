package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"time"
)

// Summary is what the rest of certdrift keeps of a certificate: enough to identify it, compare
// views and explain a finding, and small enough to hold for every certificate of a fleet.
type Summary struct {
	FingerprintSHA256 string    `json:"fingerprint_sha256"`
	SPKISHA256        string    `json:"spki_sha256"`
	Serial            string    `json:"serial"` // SerialHex: lower-case, no leading zeros
	Subject           string    `json:"subject"`
	CommonName        string    `json:"common_name,omitempty"`
	Issuer            string    `json:"issuer"`
	NotBefore         time.Time `json:"not_before"`
	NotAfter          time.Time `json:"not_after"`
	DNSNames          []string  `json:"dns_names,omitempty"`
	URIs              []string  `json:"uris,omitempty"`
	IPs               []string  `json:"ips,omitempty"`
	IsCA              bool      `json:"is_ca"`
	KeyAlgorithm      string    `json:"key_algorithm"` // e.g. "RSA-2048", "ECDSA-P256", "Ed25519"
	SignatureAlgo     string    `json:"signature_algorithm"`
}

// Summarize extracts c's Summary. A nil certificate gives the zero Summary.
func Summarize(c *x509.Certificate) Summary {
	if c == nil {
		return Summary{}
	}
	s := Summary{
		FingerprintSHA256: Fingerprint(c),
		SPKISHA256:        SPKIHash(c),
		Serial:            SerialHex(c.SerialNumber),
		Subject:           c.Subject.String(),
		CommonName:        c.Subject.CommonName,
		Issuer:            c.Issuer.String(),
		NotBefore:         c.NotBefore.UTC(),
		NotAfter:          c.NotAfter.UTC(),
		DNSNames:          append([]string(nil), c.DNSNames...),
		IsCA:              c.IsCA,
		KeyAlgorithm:      KeyAlgorithm(c),
		SignatureAlgo:     c.SignatureAlgorithm.String(),
	}
	for _, u := range c.URIs {
		s.URIs = append(s.URIs, u.String())
	}
	for _, ip := range c.IPAddresses {
		s.IPs = append(s.IPs, ip.String())
	}
	return s
}

// KeyAlgorithm names c's public key with its size: "RSA-2048", "ECDSA-P256", "Ed25519".
func KeyAlgorithm(c *x509.Certificate) string {
	switch k := c.PublicKey.(type) {
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA-%d", k.N.BitLen())
	case *ecdsa.PublicKey:
		if k.Curve != nil && k.Curve.Params() != nil {
			return fmt.Sprintf("ECDSA-P%d", k.Curve.Params().BitSize)
		}
		return "ECDSA"
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return c.PublicKeyAlgorithm.String()
}
