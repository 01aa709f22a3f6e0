// Package audit judges the views gathered by the probes: it builds bindings (which desired
// certificate must be loaded and served where), runs the checks as pure functions with an injected
// clock, and renders findings. It does no I/O of its own beyond writing a rendered report.
package audit

import "time"

// Code is a finding code. Codes are an API: documented in docs/findings.md, never renamed.
type Code string

const (
	StaleLoaded          Code = "STALE_LOADED"
	StaleServed          Code = "STALE_SERVED"
	LoadedServedMismatch Code = "LOADED_SERVED_MISMATCH"
	ReplicaDivergence    Code = "REPLICA_DIVERGENCE"
	Expired              Code = "EXPIRED"
	Expiring             Code = "EXPIRING"
	NotYetValid          Code = "NOT_YET_VALID"
	CABundleGap          Code = "CA_BUNDLE_GAP"
	CABundleHygiene      Code = "CA_BUNDLE_HYGIENE"
	ChainIncomplete      Code = "CHAIN_INCOMPLETE"
	KeyMismatch          Code = "KEY_MISMATCH"
	HostnameMismatch     Code = "HOSTNAME_MISMATCH"
	RotationFailed       Code = "ROTATION_FAILED"
	StaleProcess         Code = "STALE_PROCESS"
	SubPathMount         Code = "SUBPATH_MOUNT"
	WeakCrypto           Code = "WEAK_CRYPTO"
	ParseError           Code = "PARSE_ERROR"
	Unreachable          Code = "UNREACHABLE"
	StaleTrust           Code = "STALE_TRUST"
	LingeringContext     Code = "LINGERING_CONTEXT"
	SourceMissing        Code = "SOURCE_MISSING"
	Unbound              Code = "UNBOUND"
	// cert-manager (certmanager.go).
	CertificateNotReady       Code = "CERTIFICATE_NOT_READY"
	RenewalOverdue            Code = "RENEWAL_OVERDUE"
	CertificateSecretMismatch Code = "CERTIFICATE_SECRET_MISMATCH"
	StaleRevision             Code = "STALE_REVISION"
)

// AllCodes lists every code, in documentation order.
var AllCodes = []Code{
	StaleLoaded, StaleServed, LoadedServedMismatch, ReplicaDivergence,
	Expired, Expiring, NotYetValid, CABundleGap, CABundleHygiene, ChainIncomplete,
	KeyMismatch, HostnameMismatch, RotationFailed, StaleProcess, SubPathMount, WeakCrypto,
	ParseError, Unreachable, StaleTrust, LingeringContext, SourceMissing, Unbound,
	CertificateNotReady, RenewalOverdue, CertificateSecretMismatch, StaleRevision,
}

// gapCodes mark input that could not be judged: a report holding one is not complete coverage,
// whatever the severity.
var gapCodes = map[Code]bool{ParseError: true, Unreachable: true, SourceMissing: true, Unbound: true}

// MarksGap reports whether a finding of code c marks input that could not be judged (it counts
// in Coverage.Gaps).
func (c Code) MarksGap() bool { return gapCodes[c] }

// Severity orders findings. The zero value is invalid.
type Severity int

const (
	Info Severity = iota + 1
	Warning
	Critical
)

func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Critical:
		return "critical"
	}
	return "unknown"
}

// MarshalText makes severities render as words in JSON.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// ParseSeverity reads "info", "warning" or "critical".
func ParseSeverity(s string) (Severity, bool) {
	for _, v := range []Severity{Info, Warning, Critical} {
		if v.String() == s {
			return v, true
		}
	}
	return 0, false
}

// Subject names what a finding is about. Fields that do not apply are empty.
type Subject struct {
	Envoy    string `json:"envoy,omitempty"`    // configured Envoy name (local mode) or "namespace/pod"
	Workload string `json:"workload,omitempty"` // Kubernetes mode: the pod's owner, "Deployment/web"
	Source   string `json:"source,omitempty"`   // desired source name
	Item     string `json:"item,omitempty"`     // merged item name, if any
	Secret   string `json:"secret,omitempty"`   // SDS secret name
	Endpoint string `json:"endpoint,omitempty"` // TLS address or admin URL
	SNI      string `json:"sni,omitempty"`
	File     string `json:"file,omitempty"`
}

// Finding is one thing certdrift found wrong (or could not check).
type Finding struct {
	Code     Code     `json:"code"`
	Severity Severity `json:"severity"`
	Subject  Subject  `json:"subject"`
	// Message is one line a person can act on; Advice says what to do.
	Message string `json:"message"`
	Advice  string `json:"advice,omitempty"`
	// Evidence holds fingerprints, serials and times; never key material.
	Evidence map[string]string `json:"evidence,omitempty"`
	// Inferred is true when the binding behind the finding was matched heuristically.
	Inferred bool `json:"inferred,omitempty"`
	// Since is when the condition started, if known (e.g. when the desired cert changed).
	Since *time.Time `json:"since,omitempty"`
}
