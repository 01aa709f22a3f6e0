package certs

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"math/big"
	"net"
	"net/url"
	"time"
)

// KeyType selects the key algorithm and size of a minted certificate.
type KeyType int

const (
	// ECDSAP256 is the default: fast to generate, so every certificate gets its own key.
	ECDSAP256 KeyType = iota
	// ECDSAP384 is a stronger curve, for variety in tests.
	ECDSAP384
	// ECDSAP224 is a curve below P-256, for weak-crypto tests.
	ECDSAP224
	// RSA2048 keys are cached (one per process) because generating them takes ~100ms.
	RSA2048
	// RSA1024 keys are cached too; they exist for weak-crypto tests.
	RSA1024
	// Ed25519 keys are fast and never cached.
	Ed25519
)

func (k KeyType) String() string {
	switch k {
	case ECDSAP256:
		return "ECDSA-P256"
	case ECDSAP384:
		return "ECDSA-P384"
	case ECDSAP224:
		return "ECDSA-P224"
	case RSA2048:
		return "RSA-2048"
	case RSA1024:
		return "RSA-1024"
	case Ed25519:
		return "Ed25519"
	}
	return "unknown"
}

// KeyFormat selects how KeyPEM encodes the private key.
type KeyFormat int

const (
	// FormatDefault is PKCS#1 for RSA, SEC1 for ECDSA and PKCS#8 for Ed25519: what openssl and
	// cfssl write by default, so the most common shape found in real Secrets.
	FormatDefault KeyFormat = iota
	// PKCS1 is "RSA PRIVATE KEY" (RSA only).
	PKCS1
	// PKCS8 is "PRIVATE KEY" (any algorithm).
	PKCS8
	// SEC1 is "EC PRIVATE KEY" (ECDSA only).
	SEC1
)

type options struct {
	commonName  string
	dnsNames    []string
	uris        []*url.URL
	ips         []net.IP
	keyType     KeyType
	keyFormat   KeyFormat
	key         crypto.Signer
	freshKey    bool
	notBefore   time.Time
	notAfter    time.Time
	sigAlg      x509.SignatureAlgorithm
	extKeyUsage []x509.ExtKeyUsage
	ekuSet      bool
	clientAuth  bool
	serial      *big.Int
	noCfssl     bool
	maxPathLen  int
	pathLenSet  bool

	badSAN string // a URI or IP that did not parse; reported through t.Fatalf when minting
}

// Option changes one property of a minted certificate.
type Option func(*options)

// WithCommonName sets the subject common name.
func WithCommonName(cn string) Option { return func(o *options) { o.commonName = cn } }

// WithDNSNames sets the DNS subject alternative names (wildcards allowed).
func WithDNSNames(names ...string) Option {
	return func(o *options) { o.dnsNames = append(o.dnsNames, names...) }
}

// WithURIs sets URI subject alternative names, e.g. SPIFFE IDs. A URI that does not parse fails
// the test when the certificate is minted.
func WithURIs(uris ...string) Option {
	return func(o *options) {
		for _, s := range uris {
			u, err := url.Parse(s)
			if err != nil {
				o.badSAN = s
				continue
			}
			o.uris = append(o.uris, u)
		}
	}
}

// WithIPs sets IP subject alternative names. An address that does not parse fails the test when
// the certificate is minted.
func WithIPs(ips ...string) Option {
	return func(o *options) {
		for _, s := range ips {
			ip := net.ParseIP(s)
			if ip == nil {
				o.badSAN = s
				continue
			}
			o.ips = append(o.ips, ip)
		}
	}
}

// WithKeyType selects the key algorithm; the default is ECDSA P-256.
func WithKeyType(k KeyType) Option { return func(o *options) { o.keyType = k } }

// WithKeyFormat selects the PEM encoding of KeyPEM.
func WithKeyFormat(f KeyFormat) Option { return func(o *options) { o.keyFormat = f } }

// WithKey uses an existing key (e.g. to renew a certificate keeping its key, so that the SPKI hash
// stays and the fingerprint changes). It overrides WithKeyType.
func WithKey(k crypto.Signer) Option { return func(o *options) { o.key = k } }

// WithFreshKey makes an RSA key that is not the process-wide cached one, for tests that need two
// different RSA keys (key mismatch). It costs about 100ms for RSA-2048.
func WithFreshKey() Option { return func(o *options) { o.freshKey = true } }

// WithValidity sets NotBefore and NotAfter.
func WithValidity(notBefore, notAfter time.Time) Option {
	return func(o *options) { o.notBefore, o.notAfter = notBefore, notAfter }
}

// WithNotBefore sets NotBefore, e.g. in the future for a not-yet-valid certificate.
func WithNotBefore(t time.Time) Option { return func(o *options) { o.notBefore = t } }

// WithNotAfter sets NotAfter, e.g. in the past for an expired certificate.
func WithNotAfter(t time.Time) Option { return func(o *options) { o.notAfter = t } }

// Expired makes a certificate that expired an hour ago (valid for the day before that).
func Expired() Option {
	return WithValidity(time.Now().Add(-25*time.Hour), time.Now().Add(-time.Hour))
}

// NotYetValid makes a certificate that becomes valid in an hour.
func NotYetValid() Option {
	return WithValidity(time.Now().Add(time.Hour), time.Now().Add(25*time.Hour))
}

// WithSignatureAlgorithm sets the algorithm the issuer signs with, e.g. x509.SHA1WithRSA for
// weak-crypto tests (the issuer must then have an RSA key).
func WithSignatureAlgorithm(a x509.SignatureAlgorithm) Option {
	return func(o *options) { o.sigAlg = a }
}

// WithSHA1 is WithSignatureAlgorithm(x509.SHA1WithRSA).
func WithSHA1() Option { return WithSignatureAlgorithm(x509.SHA1WithRSA) }

// WithClientAuth adds the client-auth extended key usage (leaves get server-auth by default).
func WithClientAuth() Option {
	return func(o *options) { o.clientAuth = true }
}

// WithExtKeyUsage replaces the extended key usages with exactly these.
func WithExtKeyUsage(u ...x509.ExtKeyUsage) Option {
	return func(o *options) { o.extKeyUsage, o.ekuSet = append([]x509.ExtKeyUsage{}, u...), true }
}

// WithSerial sets the serial number.
func WithSerial(n *big.Int) Option { return func(o *options) { o.serial = new(big.Int).Set(n) } }

// WithLeadingZeroSerial sets a random 16-byte serial whose top bit is set, so that its DER
// encoding starts with a 0x00 byte and tools that print the raw bytes show a leading "00"
// (Envoy's /certs does), while big.Int.Text(16) does not.
func WithLeadingZeroSerial() Option {
	return func(o *options) {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		b[0] |= 0x80
		o.serial = new(big.Int).SetBytes(b)
	}
}

// WithMaxPathLen sets the basic-constraints path length of a CA (0 means "no intermediates
// below").
func WithMaxPathLen(n int) Option {
	return func(o *options) { o.maxPathLen, o.pathLenSet = n, true }
}

// WithoutCfssl mints a root with crypto/x509 instead of cfssl initca, for tests that compare the
// two or need a root cfssl cannot express.
func WithoutCfssl() Option { return func(o *options) { o.noCfssl = true } }

func newOptions(defaultCN string, opts []Option) *options {
	o := &options{commonName: defaultCN}
	for _, f := range opts {
		f(o)
	}
	return o
}
