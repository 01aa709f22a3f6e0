package kube

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/certdrift/certdrift/pki"
)

// SecretSummary is what the inventory keeps of one Secret. It holds no private key material and
// no Secret data other than the DER of the public certificates (needed to rebuild x509
// certificates for the audit). It is immutable once built: a Secret update produces a new one.
type SecretSummary struct {
	Namespace       string    `json:"namespace"`
	Name            string    `json:"name"`
	UID             string    `json:"uid"`
	Type            string    `json:"type"`
	ResourceVersion string    `json:"resource_version"`
	CreatedAt       time.Time `json:"created_at"`
	// ChangedAt is when the Secret's data last changed, as well as can be told: see ChangedHow.
	ChangedAt time.Time `json:"changed_at"`
	// ChangedBy is the field manager that last wrote data (e.g. "cert-manager-certificates-issuing",
	// "kubectl-client-side-apply"), when managedFields say so.
	ChangedBy  string        `json:"changed_by,omitempty"`
	ChangedHow ChangedHow    `json:"changed_how"`
	Items      []ItemSummary `json:"items"`
	// Err is set when the Secret as a whole could not be read (too many items, say).
	Err error `json:"-"`
	// Stub says that the inventory keeps no certificates of this Secret, only its identity and
	// change record: a sharded serve keeps full summaries of the Secrets its shard owns, and reads
	// the others' when a round needs them (inventory.Inventory.Promote). Snapshots never hold
	// stubs.
	Stub bool `json:"-"`
}

// Key is "namespace/name".
func (s *SecretSummary) Key() string { return s.Namespace + "/" + s.Name }

// ChangedHow says where ChangedAt came from.
type ChangedHow string

const (
	// ChangedManagedFields: the timestamp of the managedFields entry that owns data (f:data).
	ChangedManagedFields ChangedHow = "managed-fields"
	// ChangedObserved: certdrift saw the resourceVersion and the certificates change.
	ChangedObserved ChangedHow = "observed"
	// ChangedCreated: no better evidence; the creation time is a lower bound.
	ChangedCreated ChangedHow = "created"
)

// ItemSummary is one certificate of a Secret with its key and CA bundle: the whole Secret for a
// kubernetes.io/tls Secret, or one "<name>.crt"/"<name>.key" pair of a merged layout.
type ItemSummary struct {
	// Name is "" for a fixed layout (tls.crt), or the <name> of a merged item.
	Name string `json:"name,omitempty"`
	// The data keys the item was read from; KeyKey and CAKey are "" when absent from the Secret.
	CertKey string `json:"cert_key"`
	KeyKey  string `json:"key_key,omitempty"`
	CAKey   string `json:"ca_key,omitempty"`

	Chain    []Cert `json:"chain,omitempty"` // leaf first, as in the Secret
	ChainErr error  `json:"-"`

	Key    *KeySummary `json:"key,omitempty"` // nil when there is no key or it failed to parse
	KeyErr error       `json:"-"`

	CA    *Bundle `json:"ca,omitempty"` // nil when there is no CA key
	CAErr error   `json:"-"`
}

// Leaf returns the first certificate of the chain, or nil.
func (it *ItemSummary) Leaf() *Cert {
	if len(it.Chain) == 0 {
		return nil
	}
	return &it.Chain[0]
}

// Cert is one certificate, kept as its DER only: Observations rebuild the x509 form from it for
// the audit and the exposition, which derive everything else from that, so a parsed pki.Summary
// kept beside it (fingerprints in hex, subject, issuer, SANs: ~500 bytes per Secret, a quarter of
// the inventory's heap at 10,000 Secrets, docs/benchmarks.md) was a second copy nobody read.
// Summary and Fingerprint derive them on demand.
type Cert struct {
	DER []byte `json:"-"`
}

// Summary parses the certificate again and summarizes it. The DER was parsed when the Secret was
// read, so an error here would mean the summary was built by hand.
func (c Cert) Summary() (pki.Summary, error) {
	x, err := x509.ParseCertificate(c.DER)
	if err != nil {
		return pki.Summary{}, fmt.Errorf("certificate %s: %w", c.Fingerprint(), err)
	}
	return pki.Summarize(x), nil
}

// Fingerprint is the hex SHA-256 of the DER, as pki.Fingerprint gives it.
func (c Cert) Fingerprint() string {
	sum := sha256.Sum256(c.DER)
	return hex.EncodeToString(sum[:])
}

// MarshalJSON writes the certificate's summary, as when Cert embedded it.
func (c Cert) MarshalJSON() ([]byte, error) {
	s, err := c.Summary()
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// KeySummary describes a private key without holding it.
type KeySummary struct {
	Algorithm string `json:"algorithm"`
	Format    string `json:"format"`
	// Matches is whether the key is the private half of the leaf's public key.
	Matches bool `json:"matches"`
	// Public is the key's public half, for the audit's own key check, kept only when it does not
	// match the leaf (a standalone copy: nothing of the private key stays reachable). When it
	// matches, the leaf's own public key says the same, and Observations hands the audit that
	// one: keeping a parsed key per Secret was a third of the inventory's heap.
	Public any `json:"-"`
}

// Bundle is a parsed CA bundle. Bundles with identical bytes are shared between summaries (a
// cluster's TLS Secrets usually carry the same ca.crt), so a Bundle must never be modified.
type Bundle struct {
	Certs []Cert `json:"certs"`
}

// ConfigMapSummary is what the inventory keeps of one ConfigMap: its CA bundles.
type ConfigMapSummary struct {
	Namespace       string     `json:"namespace"`
	Name            string     `json:"name"`
	UID             string     `json:"uid"`
	ResourceVersion string     `json:"resource_version"`
	CreatedAt       time.Time  `json:"created_at"`
	ChangedAt       time.Time  `json:"changed_at"`
	ChangedBy       string     `json:"changed_by,omitempty"`
	ChangedHow      ChangedHow `json:"changed_how"`
	// Bundles holds one entry per key whose value looks like PEM certificates, sorted by key.
	Bundles []KeyBundle `json:"bundles"`
	// Err is set when the ConfigMap could not be read at all (inventory.Inventory.Fetch).
	Err error `json:"-"`
}

// Key is "namespace/name".
func (c *ConfigMapSummary) Key() string { return c.Namespace + "/" + c.Name }

// KeyBundle is the bundle found under one ConfigMap key.
type KeyBundle struct {
	Key    string  `json:"key"`
	Bundle *Bundle `json:"bundle,omitempty"`
	Err    error   `json:"-"`
}
