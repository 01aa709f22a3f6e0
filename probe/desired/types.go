// Package desired holds the desired view as plain data: what one source of certificates held at
// one moment, whether it was read from local files (probe/files) or summarised from a Kubernetes
// Secret or ConfigMap (probe/kube). The audit judges these values and the collector shows them.
//
// It imports only pki, ref and the standard library, as probe/envoystate does for the loaded view,
// so that the judgement can read the desired view without linking a file reader or a Kubernetes
// client (audit's TestAuditDependencies keeps it so). The observation's identity is a typed
// ref.Source rather than a name parsed where it is used.
package desired

import (
	"crypto/x509"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/ref"
)

// Observation is what one desired source held at one moment.
type Observation struct {
	// Ref names the source: a Secret or ConfigMap in Kubernetes mode, a File (with its configured
	// name) for a local source. Ref.String() is its name in findings, labels and JSON.
	Ref ref.Source
	// Dir is the local source's directory (kubelet layout or plain), "" for explicit files and for
	// Kubernetes objects. CertFile is a local source's explicit certificate path, used when Dir is
	// empty. Both say where a missing source was looked for.
	Dir, CertFile string
	// DataDir is the resolved "..data" target (e.g. "..2026_11_22_04_01_02.123456789") when Dir
	// is in kubelet layout, else "".
	DataDir string
	// ChangedAt is when the content last changed as far as the source tells: the mtime of the
	// resolved data directory or of the newest file read, or the object's last change.
	ChangedAt time.Time
	Items     []Item
	// Err is set when the source could not be read at all (missing directory, dangling ..data,
	// an object that could not be summarised).
	Err error
}

// Item is one certificate with its key and CA bundle.
type Item struct {
	// Name is "" for a plain source, or the <name> of a merged item (a ConfigMap's key).
	Name string
	// Paths as configured (not resolved through ..data), for matching against the paths Envoy
	// reports in /certs and config_dump; "namespace/name/key" for a Kubernetes object.
	CertPath, KeyPath, CAPath string

	Chain    []*x509.Certificate // leaf first, as in the file
	ChainErr error

	Key    *pki.KeyInfo // nil when there is no key file or it failed to parse
	KeyErr error

	CA    []*x509.Certificate // nil when there is no CA file
	CAErr error

	// Lazy, when set, holds the certificates unparsed and Chain, CA and Key.Public are nil
	// (lazy.go): use HasChain, LeafDER, LeafFacts, or Load for the x509 form.
	Lazy *Lazy
}
