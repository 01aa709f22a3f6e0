// Package files reads the desired view of certificates from disk: plain files, or a directory in
// the kubelet's Secret-volume layout (a "..data" symlink to a timestamped directory, and each key a
// symlink into "..data"). All keys of one directory are read through the same resolved "..data"
// target, so a kubelet swap in the middle of a read can never produce a torn cert/key pair.
package files

import (
	"crypto/x509"
	"time"

	"github.com/certdrift/certdrift/pki"
)

// Source says where one desired certificate (or a merged set of them) lives.
type Source struct {
	// Name identifies the source in findings (e.g. "frontend-tls").
	Name string
	// Dir is a directory (kubelet layout or plain). If empty, the explicit paths are used.
	Dir string
	// CertKey, KeyKey, CAKey are file names inside Dir; defaults tls.crt, tls.key, ca.crt.
	// A missing key file is not an error (many Secrets carry no ca.crt).
	CertKey, KeyKey, CAKey string
	// Merged, when set, reads every "<name><CertSuffix>" in Dir with its "<name><KeySuffix>"
	// as its own item (the merged Secret layout of an ingress gateway serving many hosts).
	Merged *MergedPattern
	// CertFile, KeyFile, CAFile are explicit paths, used when Dir is empty.
	CertFile, KeyFile, CAFile string
}

// MergedPattern describes the "<name>.crt"/"<name>.key" layout.
type MergedPattern struct {
	CertSuffix string // default ".crt"
	KeySuffix  string // default ".key"
}

// Observation is what one Source held at one moment.
type Observation struct {
	Source Source
	// DataDir is the resolved "..data" target (e.g. "..2026_11_22_04_01_02.123456789") when Dir
	// is in kubelet layout, else "".
	DataDir string
	// ChangedAt is when the content last changed as far as the filesystem tells: the mtime of
	// the resolved data directory, or of the newest file read.
	ChangedAt time.Time
	Items     []Item
	// Err is set when the source could not be read at all (missing directory, dangling ..data).
	Err error
}

// Item is one certificate with its key and CA bundle.
type Item struct {
	// Name is "" for a plain source, or the <name> of a merged item.
	Name string
	// Paths as configured (not resolved through ..data), for matching against the paths Envoy
	// reports in /certs and config_dump.
	CertPath, KeyPath, CAPath string

	Chain    []*x509.Certificate // leaf first, as in the file
	ChainErr error

	Key    *pki.KeyInfo // nil when there is no key file or it failed to parse
	KeyErr error

	CA    []*x509.Certificate // nil when there is no CA file
	CAErr error
}
