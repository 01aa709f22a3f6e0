// Package files reads the desired view of certificates from disk: plain files, or a directory in
// the kubelet's Secret-volume layout (a "..data" symlink to a timestamped directory, and each key a
// symlink into "..data"). All keys of one directory are read through the same resolved "..data"
// target, so a kubelet swap in the middle of a read can never produce a torn cert/key pair.
package files

// Source says where one desired certificate (or a merged set of them) lives: the reader's input.
// What Read returns is a desired.Observation, the same type probe/kube produces.
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
