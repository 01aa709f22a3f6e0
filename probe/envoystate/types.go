// Package envoystate holds the loaded view as plain data: what one Envoy holds in memory, as its
// admin endpoint reports it (/certs contexts, /config_dump secrets and listener TLS contexts,
// /stats counters). probe/envoyadmin produces these values; audit judges them and exposition
// shows them. The package has no clients and no parsers, so that the judgement can read Envoy's
// state without linking an HTTP stack (audit's TestAuditDependencies keeps it so).
//
// The values keep Envoy's quirks as read (see probe/envoyadmin's doc): /certs carries no secret
// names or fingerprints, and CertDetail.DaysUntilExpiration is unreliable.
package envoystate

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

	// Contexts are the entries of /certs in Envoy's order. CertsErr is set only when /certs as a
	// whole could not be fetched or read; a problem confined to one entry or one certificate is on
	// that TLSContext or CertDetail (Err), not here.
	Contexts  []TLSContext
	CertsErr  error
	Secrets   []Secret // from /config_dump SecretsConfigDump
	Listeners []FilterChainTLS
	// ConfigSkipped lists the parts of /config_dump that certdrift could not read and could not
	// attach to a Secret or FilterChainTLS (a problem inside a secret's or a filter chain's TLS
	// material is on that object: Secret.Err, ChainErr, ValidationCAErr, FilterChainTLS.InlineCertsErr,
	// InlineCAErr). Each is a gap in coverage: what those parts held was not judged. ConfigErr is set
	// only when no dump could be fetched or read at all.
	ConfigSkipped []ConfigSkip
	ConfigErr     error
	Stats         Stats
	StatsErr      error
	CollectedAt   time.Time
	// Truncated is set when the admin reported more entries than Options.MaxEntries (contexts,
	// secrets, filter chains or skipped parts): it says what was dropped ("50000 /certs contexts,
	// only the first 2000 kept"). What was dropped was not judged: a gap in coverage.
	Truncated string
}

// ConfigSkip is one part of /config_dump that was not read.
type ConfigSkip struct {
	// Part is the field path of the part in the dump, in proto field names whatever spelling the
	// dump used: "configs[1].dynamic_active_secrets[3]",
	// "configs[2].dynamic_listeners[0].active_state.listener.filter_chains[1].transport_socket", or
	// for a bare SecretsConfigDump (istioctl proxy-config secret -o json) "dynamic_active_secrets[3]".
	Part string
	// Reason says why in one line: the unknown type URL, or what was found where something else
	// was expected. It never quotes certificate, key or secret bytes.
	Reason string
}

func (s ConfigSkip) String() string { return s.Part + ": " + s.Reason }

// TLSContext is one entry of /certs: one live TLS context.
type TLSContext struct {
	// CA is at most one in practice. Chain holds one entry per tls_certificate of the context (an
	// RSA and an ECDSA certificate give two), each its leaf only.
	CA    []CertDetail
	Chain []CertDetail
	// Err is set when the entry itself could not be read (not an object, ca_cert or cert_chain not
	// an array); CA and Chain are then empty, and what Envoy holds in this context is unknown.
	Err error
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
	// DaysUntilExpiration is Envoy's own figure; unreliable (0 when under a day or expired, huge in
	// old versions): use Expiration.
	DaysUntilExpiration uint64
	// Err names every field of this entry that could not be read, "field: reason" joined: a serial
	// that is not hex (Serial nil), a valid_from or expiration_time that is not a timestamp (left
	// zero), a missing expiration_time, SANs of the wrong shape. The fields that did read are kept.
	// A zero ValidFrom with a nil Err means Envoy printed none (old versions).
	Err error
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

	// Err is set when the secret's payload could not be read at all (a type certdrift does not
	// know, or a payload that is not a Secret message): what it holds is unknown, and
	// HasCertificate/HasValidation say nothing. Problems inside a payload that did read are in
	// ChainErr and ValidationCAErr instead.
	Err error

	// For a TLS certificate secret (HasCertificate): the chain when Envoy inlined it (SDS over
	// xDS, file-based SDS), or the file it reads (static), and the watched directory if any.
	// ChainErr names the field and says why when the certificate could not be read: inline bytes
	// that are not certificates (elided, "[redacted]", truncated, garbage, empty), a block of a
	// chain that does not parse (Chain then keeps the blocks that did), a chain given in a form
	// the admin API does not show (environment_variable, pkcs12) or not at all. A chain given as a
	// file name (CertFile) is not an error.
	Chain          []*x509.Certificate
	ChainErr       error
	CertFile       string
	KeyFile        string
	WatchedDir     string
	KeyRedacted    bool // Envoy printed "[redacted]" for the private key: expected
	HasCertificate bool
	HasValidation  bool
	// For a validation-context secret (HasValidation): the trusted CAs when inline, else CAFile,
	// and the validation context's watched_directory. ValidationCAErr names the field and says why
	// when trusted_ca or a SPIFFE trust bundle could not be read (ValidationCA and SPIFFEBundles
	// keep the blocks that did parse), or the trust comes from somewhere the admin API does not
	// show (a certificate provider, an unknown custom validator).
	ValidationCA    []*x509.Certificate
	ValidationCAErr error
	CAFile          string
	CAWatchedDir    string
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
	// a chain given inline, whose certificates are then in InlineCerts. InlineCertsErr names the
	// tls_certificates entry and field and says why when one could not be read (InlineCerts keeps
	// the certificates that did parse), as Secret.ChainErr does.
	CertFiles         []string
	InlineCerts       []*x509.Certificate
	InlineCertsErr    error
	SDSValidationName string
	// SDSValidationSource is the file-based config source of SDSValidationName, nil when it has
	// none.
	SDSValidationSource *SDSSource
	// The static validation context (validation_context, or combined_validation_context's
	// default_validation_context): trusted_ca as a file (CAFile) or inline (InlineCA), its
	// watched_directory (CAWatchedDir), SPIFFE validator bundles by trust domain. InlineCAErr names
	// the field and says why when any of it could not be read, as Secret.ValidationCAErr does.
	CAFile            string
	InlineCA          []*x509.Certificate
	InlineCAErr       error
	CAWatchedDir      string
	SPIFFEBundles     map[string][]*x509.Certificate
	RequireClientCert bool
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
