package kube

import (
	"time"
)

// cert-manager's own names (github.com/cert-manager/cert-manager pkg/apis/certmanager/v1,
// v1.21.2): the annotation it writes on the Secrets it issues, and the one on each
// CertificateRequest that says which revision of its Certificate the request is. cert-manager
// writes no revision annotation on Secrets: a Secret's revision is the revision of the request
// whose certificate it holds.
const (
	CertManagerCertificateNameAnnotation = "cert-manager.io/certificate-name"
	CertManagerRevisionAnnotation        = "cert-manager.io/certificate-revision"
)

// CertManager is what certdrift read of cert-manager (cert-manager.io/v1) in one round. The zero
// value means "not read" (local mode); Present false with Read true means the API server does not
// serve the CRDs, which is not an error: cert-manager is simply not installed.
type CertManager struct {
	// Read is set when the Kubernetes mode looked for cert-manager at all.
	Read bool
	// Present is set when the API server serves certificates.cert-manager.io.
	Present bool
	// Err is set when the resources are served but could not be listed (RBAC, say): a gap in
	// coverage, not an absence.
	Err          error
	Certificates []CMCertificate
	Requests     []CMRequest
}

// CMCondition is one status condition, as cert-manager writes it.
type CMCondition struct {
	Status             string    `json:"status"` // "True", "False", "Unknown", or "" when absent
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"last_transition_time,omitzero"`
}

// CMCertificate is what certdrift keeps of a Certificate: its Secret and the status fields the
// checks read. No private key is involved (a Certificate holds none).
type CMCertificate struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	SecretName string `json:"secret_name"`
	// Revision is status.revision (0: never issued).
	Revision int         `json:"revision"`
	Ready    CMCondition `json:"ready"`
	// Issuing is the Issuing condition: True while a (re)issuance is in progress; False with
	// reason Failed after a failed one (cert-manager then backs off).
	Issuing CMCondition `json:"issuing"`
	// NotBefore, NotAfter and RenewalTime are the status fields of the same names (zero: absent).
	NotBefore   time.Time `json:"not_before,omitzero"`
	NotAfter    time.Time `json:"not_after,omitzero"`
	RenewalTime time.Time `json:"renewal_time,omitzero"`
	// FailedIssuanceAttempts and LastFailureTime: cert-manager's record of failed issuances since
	// the last success.
	FailedIssuanceAttempts int       `json:"failed_issuance_attempts,omitempty"`
	LastFailureTime        time.Time `json:"last_failure_time,omitzero"`
	// Err is set when the object could not be read as a Certificate (a field of the wrong type).
	Err error `json:"-"`
}

// Key is "namespace/name".
func (c *CMCertificate) Key() string { return c.Namespace + "/" + c.Name }

// SecretKey is the "namespace/name" of the Secret the Certificate writes.
func (c *CMCertificate) SecretKey() string { return c.Namespace + "/" + c.SecretName }

// CMRequest is what certdrift keeps of a CertificateRequest: which Certificate and revision it
// is, and the fingerprint of the leaf it was issued (status.certificate), never the CSR.
type CMRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Certificate is the owning Certificate's name (its controller ownerReference, else the
	// cert-manager.io/certificate-name annotation).
	Certificate string `json:"certificate"`
	// Revision is the cert-manager.io/certificate-revision annotation (0: absent or not a number).
	Revision int         `json:"revision"`
	Ready    CMCondition `json:"ready"`
	// LeafSHA256 is the hex SHA-256 of the issued leaf's DER ("" before issuance or when
	// status.certificate does not parse); LeafNotAfter its end of validity.
	LeafSHA256   string    `json:"leaf_sha256,omitempty"`
	LeafNotAfter time.Time `json:"leaf_not_after,omitzero"`
	CreatedAt    time.Time `json:"created_at"`
}
