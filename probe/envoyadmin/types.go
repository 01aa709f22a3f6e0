// Package envoyadmin observes the loaded view: what an Envoy holds in memory, read from its admin
// endpoint (/certs, /config_dump secrets and listeners, /stats). Responses are decoded with
// encoding/json into structs holding only the fields certdrift reads (wire.go; decode.go says why
// not go-control-plane), ignoring unknown fields so that newer and older Envoys both parse, with a
// size limit and a deadline on every request.
//
// Envoy quirks handled here (see DESIGN.md): /certs has no secret names or fingerprints, lists one
// entry per live TLS context (duplicates and stale contexts appear), shows at most one CA and no
// intermediates, and days_until_expiration is unreliable (0 when under a day or expired, huge in
// old versions) — callers should use Expiration. Serial numbers are kept as integers.
package envoyadmin

import (
	"crypto/x509"
	"math/big"
	"time"
)

// Snapshot is everything read from one admin endpoint in one pass. Each part has its own error,
// so an Envoy that refuses /config_dump still yields /certs.
type Snapshot struct {
	AdminURL string
	// ServerVersion from /server_info, when available ("1.40.0").
	ServerVersion string
	// ServerStart from /server_info uptime, when available.
	ServerStart   time.Time
	ServerInfoErr error

	Contexts  []TLSContext // from /certs
	CertsErr  error
	Secrets   []Secret // from /config_dump SecretsConfigDump
	Listeners []FilterChainTLS
	// ConfigSkipped names config_dump entries that were not read (unknown type URLs, entries that
	// did not decode): a gap in coverage, not a failure.
	ConfigSkipped []string
	ConfigErr     error
	Stats         Stats
	StatsErr      error
	CollectedAt   time.Time
}

// TLSContext is one entry of /certs: one live TLS context.
type TLSContext struct {
	CA    []CertDetail // at most one in practice
	Chain []CertDetail // leaf only in practice
}

// CertDetail is one certificate as /certs describes it: no fingerprint, no issuer.
type CertDetail struct {
	// Path is the file name, or "<inline>" for SDS-delivered bytes, or "<trust domain>: <inline>"
	// for SPIFFE validators.
	Path        string
	Serial      *big.Int // nil if Envoy printed something that is not hex
	SerialText  string   // as printed
	DNSNames    []string
	URIs        []string
	IPAddresses []string
	ValidFrom   time.Time
	Expiration  time.Time
	// DaysUntilExpiration is Envoy's own figure; unreliable (see package doc).
	DaysUntilExpiration uint64
}

// SecretState says which list of the SecretsConfigDump a secret came from.
type SecretState string

const (
	SecretStatic  SecretState = "static"
	SecretActive  SecretState = "active"
	SecretWarming SecretState = "warming"
)

// Secret is one SDS secret (or static secret) from /config_dump.
type Secret struct {
	Name        string
	State       SecretState
	VersionInfo string
	LastUpdated time.Time

	// For a TLS certificate secret: the chain when Envoy inlined it (SDS over xDS), or the file
	// it reads (file-based SDS or static), and the watched directory if any.
	Chain           []*x509.Certificate
	ChainErr        error
	CertFile        string
	KeyFile         string
	WatchedDir      string
	KeyRedacted     bool // Envoy printed "[redacted]" for the private key: expected
	HasCertificate  bool
	HasValidation   bool
	ValidationCA    []*x509.Certificate // trusted CA for a validation-context secret
	ValidationCAErr error
	CAFile          string
	// SPIFFEBundles holds the trust bundles of a SPIFFE certificate validator
	// (custom_validator_config), by trust domain; such secrets carry no trusted_ca. Errors are in
	// ValidationCAErr.
	SPIFFEBundles map[string][]*x509.Certificate
}

// FilterChainTLS is one downstream TLS context of a listener filter chain: which SNIs it serves and
// where its certificate and trust bundle come from.
type FilterChainTLS struct {
	Listener string
	// State is the listener's: "static", or for LDS listeners "active", "warming" or "draining".
	State       string
	Address     string // host:port the listener binds, when a socket address
	FilterChain string // filter chain name, may be empty
	ServerNames []string
	// Where the certificate comes from: SDS secret names and/or inline/file certificates.
	SDSCertNames []string
	// SDSCertSources are the file-based config sources of the SDS certificates, one per name in
	// SDSCertNames that Envoy reads from a file (none for ADS/API sources or static secrets).
	// Envoy's dumped secret of a file-based SDS resource keeps neither the resource file nor the
	// certificate file names, so this is the only link from such a secret to where its files live.
	SDSCertSources []SDSSource
	// CertFiles are the certificate_chain file names of inline tls_certificates; "<inline>" for
	// a chain given inline, whose certificates are then in InlineCerts.
	CertFiles         []string
	InlineCerts       []*x509.Certificate
	SDSValidationName string
	// SDSValidationSource is the file-based config source of SDSValidationName, nil when it has
	// none.
	SDSValidationSource *SDSSource
	CAFile              string
	RequireClientCert   bool
}

// SDSSource is the file-based config source (sds_config) of one SDS secret a listener names.
type SDSSource struct {
	Name string // the SDS secret name
	// Path is the SDS resource file: path_config_source.path, or the deprecated sds_config.path.
	Path string
	// WatchedDir is path_config_source.watched_directory: a move into it (the kubelet's "..data"
	// swap) makes Envoy re-read Path. Empty when not set.
	WatchedDir string
}

// Stats holds the counters and gauges certdrift reads from /stats (the text format does not say
// which is which). Names are Envoy's, unmodified; helpers in stats.go group them.
type Stats struct {
	Counters map[string]uint64
}
