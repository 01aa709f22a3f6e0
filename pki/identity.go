package pki

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"unicode/utf8"
)

// Fingerprint is the lower-case hex SHA-256 of the certificate's DER encoding, the identity
// certdrift uses to compare views.
func Fingerprint(c *x509.Certificate) string { return FingerprintDER(c.Raw) }

// FingerprintDER is Fingerprint of a certificate's DER, without parsing it.
func FingerprintDER(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// SPKIHash is the lower-case hex SHA-256 of the certificate's SubjectPublicKeyInfo: equal for two
// certificates that share a key (a renewal that reused the key has a new fingerprint but the same
// SPKI).
func SPKIHash(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// ParseSerial reads a serial number as Envoy and other tools print it: hex, either case, with or
// without leading zeros, optionally with a 0x prefix or colons between bytes.
func ParseSerial(s string) (*big.Int, error) {
	// RFC 5280 caps serials at 20 octets; 256 bytes allows for sloppy issuers, colons and spaces
	// while refusing a hostile megabyte before any work is done.
	if len(s) > 256 {
		return nil, fmt.Errorf("serial number %q is too long (%d bytes)", truncate(s, 40), len(s))
	}
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.TrimPrefix(t, "0x"), "0X")
	t = strings.ReplaceAll(t, ":", "")
	if t == "" || len(t) > 128 {
		return nil, fmt.Errorf("serial number %q is empty or too long", truncate(s, 40))
	}
	// big.Int.SetString accepts a sign; a serial has none, and "-1" must not equal a real serial.
	for i := 0; i < len(t); i++ {
		if !isHexDigit(t[i]) {
			return nil, fmt.Errorf("serial number %q is not hex", truncate(s, 40))
		}
	}
	n, ok := new(big.Int).SetString(t, 16)
	if !ok {
		return nil, fmt.Errorf("serial number %q is not hex", truncate(s, 40))
	}
	return n, nil
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// SerialHex formats a serial number the one way certdrift prints it: lower-case hex, no leading
// zeros (so that two sources that disagree only in formatting print the same string).
func SerialHex(n *big.Int) string {
	if n == nil {
		return ""
	}
	return n.Text(16)
}

// SerialsEqual compares two serials as integers.
func SerialsEqual(a, b *big.Int) bool {
	return a != nil && b != nil && a.Cmp(b) == 0
}

// truncate shortens s for an error message, on a rune boundary.
func truncate(s string, n int) string {
	// What is quoted in an error may come from a hostile admin: nothing key-like is echoed.
	s = string(RedactKeyMaterial([]byte(s[:min(len(s), 4096)])))
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// SameNames reports whether two lists of certificate names (DNS names, URIs) hold the same names,
// in any order: Envoy's /certs, config_dump and the desired certificate list them in their own
// orders.
func SameNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
