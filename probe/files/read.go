package files

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/certdrift/certdrift/internal/boundedfile"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/ref"
)

// Defaults for Source and MergedPattern fields left empty.
const (
	DefaultCertKey    = "tls.crt"
	DefaultKeyKey     = "tls.key"
	DefaultCAKey      = "ca.crt"
	DefaultCertSuffix = ".crt"
	DefaultKeySuffix  = ".key"
)

// MaxMergedEntries bounds how many directory entries a merged source may hold: a hostile or
// mistaken directory with millions of files must not turn one read into millions of parses.
const MaxMergedEntries = 10000

// maxAttempts bounds re-reads when ..data is swapped during a read. The kubelet swaps at most
// about once a sync period, so a second attempt practically always settles.
const maxAttempts = 5

// ErrUnsettled is returned when ..data moved during every attempt to read a source.
var ErrUnsettled = errors.New("..data kept changing while reading")

// Read observes src once. Problems reading the source as a whole (a missing directory, a dangling
// ..data, a bad configuration) are in the observation's Err; problems with one file are in that item's
// ChainErr, KeyErr or CAErr. It never panics and never puts key bytes into an error.
func Read(src Source, lim pki.Limits) desired.Observation {
	var obs desired.Observation
	for attempt := 1; ; attempt++ {
		r := &reader{lim: lim, max: lim.MaxBytes, views: map[string]*view{}}
		if r.max <= 0 {
			r.max = pki.DefaultLimits.MaxBytes
		}
		obs = r.read(src)
		if !r.moved() {
			break
		}
		// A file of the version we resolved may have been deleted under us; what we read is
		// consistent but may be incomplete, so read again from the new version.
		if attempt == maxAttempts {
			obs = desired.Observation{Err: fmt.Errorf("source %s: %w (%d attempts)", describe(src), ErrUnsettled, attempt)}
			break
		}
	}
	// A local source is named as the configuration names it; Dir and CertFile say where it was
	// looked for (findings about a missing source name the place).
	obs.Ref = ref.Source{Kind: ref.File, Name: src.Name}
	obs.Dir, obs.CertFile = src.Dir, src.CertFile
	return obs
}

func describe(src Source) string {
	switch {
	case src.Name != "":
		return src.Name
	case src.Dir != "":
		return src.Dir
	default:
		return src.CertFile
	}
}

type reader struct {
	lim    pki.Limits
	max    int
	views  map[string]*view
	newest time.Time
}

// moved reports whether any kubelet directory this read went through has been swapped since.
func (r *reader) moved() bool {
	for _, v := range r.views {
		if v.moved() {
			return true
		}
	}
	return false
}

func (r *reader) read(src Source) desired.Observation {
	if src.Dir == "" {
		return r.readExplicit(src)
	}
	v, err := resolve(src.Dir)
	if err != nil {
		return desired.Observation{Err: err}
	}
	r.views[src.Dir] = v
	obs := desired.Observation{DataDir: v.dataDir}
	if src.Merged != nil {
		obs.Items, obs.Err = r.readMerged(v, src)
	} else {
		cert := r.inDir(v, or(src.CertKey, DefaultCertKey), false)
		key := r.inDir(v, or(src.KeyKey, DefaultKeyKey), true)
		ca := r.inDir(v, or(src.CAKey, DefaultCAKey), true)
		obs.Items = []desired.Item{r.item("", cert, key, ca)}
	}
	obs.ChangedAt = v.changed
	if v.dataDir == "" {
		obs.ChangedAt = r.newest
	}
	return obs
}

// readExplicit reads configured file paths. A path that is a kubelet visible symlink is read
// through its directory's resolved ..data, so a cert and key in one volume still come from one
// version.
func (r *reader) readExplicit(src Source) desired.Observation {
	if src.CertFile == "" && src.CAFile == "" {
		return desired.Observation{Err: errors.New("source has neither a directory, a certificate file nor a CA file")}
	}
	var cert, key, ca fileRef
	var err error
	if src.CertFile != "" {
		if cert, err = r.explicit(src.CertFile); err != nil {
			return desired.Observation{Err: err}
		}
	}
	if src.KeyFile != "" {
		if key, err = r.explicit(src.KeyFile); err != nil {
			return desired.Observation{Err: err}
		}
	}
	if src.CAFile != "" {
		if ca, err = r.explicit(src.CAFile); err != nil {
			return desired.Observation{Err: err}
		}
	}
	obs := desired.Observation{Items: []desired.Item{r.item("", cert, key, ca)}, ChangedAt: r.newest}
	if v := r.views[filepath.Dir(or(src.CertFile, src.CAFile))]; v != nil && v.dataDir != "" {
		obs.DataDir, obs.ChangedAt = v.dataDir, v.changed
	}
	return obs
}

func (r *reader) explicit(path string) (fileRef, error) {
	ref := fileRef{shown: path, read: path}
	if !throughData(path) {
		return ref, nil
	}
	dir := filepath.Dir(path)
	v := r.views[dir]
	if v == nil {
		var err error
		if v, err = resolve(dir); err != nil {
			return fileRef{}, fmt.Errorf("file %s: %w", path, err)
		}
		r.views[dir] = v
	}
	ref.read = filepath.Join(v.base, filepath.Base(path))
	return ref, nil
}

// readMerged lists the resolved directory once and pairs every <name><CertSuffix> with its
// <name><KeySuffix>. The CA file, if any, is shared by all items and is not an item itself.
func (r *reader) readMerged(v *view, src Source) ([]desired.Item, error) {
	cs, ks := or(src.Merged.CertSuffix, DefaultCertSuffix), or(src.Merged.KeySuffix, DefaultKeySuffix)
	if cs == ks {
		return nil, fmt.Errorf("source %s: merged certificate and key suffix are both %q", src.Dir, cs)
	}
	caName := or(src.CAKey, DefaultCAKey)
	d, err := boundedfile.OpenDir(v.base)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", src.Dir, unwrapPath(err))
	}
	entries, err := d.ReadDir(MaxMergedEntries + 1)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty directory
		return nil, fmt.Errorf("list %s: %w", src.Dir, unwrapPath(err))
	}
	if len(entries) > MaxMergedEntries {
		return nil, fmt.Errorf("list %s: %w: more than %d entries", src.Dir, pki.ErrTooLarge, MaxMergedEntries)
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || n == caName || !strings.HasSuffix(n, cs) || n == cs {
			continue
		}
		names = append(names, strings.TrimSuffix(n, cs))
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("source %s: no *%s files", src.Dir, cs)
	}
	ca := r.inDir(v, caName, true)
	caData := r.load(ca)
	var items []desired.Item
	for _, n := range names { // ReadDir sorts by name, so items are in a stable order
		it := r.item(n, r.inDir(v, n+cs, false), r.inDir(v, n+ks, true), fileRef{})
		it.CAPath = ca.shown
		it.CA, it.CAErr = parseCA(ca, caData, r.lim)
		items = append(items, it)
	}
	return items, nil
}

// fileRef is one file of an item: the path as configured, named in errors and in Item, and the
// path actually opened.
type fileRef struct {
	shown, read string
	optional    bool // absence is not an error (tls.key and ca.crt of a directory source)
}

func (r *reader) inDir(v *view, name string, optional bool) fileRef {
	return fileRef{shown: filepath.Join(v.dir, name), read: filepath.Join(v.base, name), optional: optional}
}

// loaded is a file's content, or why there is none; absent is an optional file that does not
// exist.
type loaded struct {
	data   []byte
	absent bool
	err    error
}

func (r *reader) load(f fileRef) loaded {
	if f.shown == "" {
		return loaded{absent: true}
	}
	data, mtime, err := readLimited(f.read, r.max)
	if err != nil {
		if f.optional && errors.Is(err, fs.ErrNotExist) {
			return loaded{absent: true}
		}
		return loaded{err: err}
	}
	if mtime.After(r.newest) {
		r.newest = mtime
	}
	return loaded{data: data}
}

func (r *reader) item(name string, cert, key, ca fileRef) desired.Item {
	it := desired.Item{Name: name, CertPath: cert.shown, KeyPath: key.shown, CAPath: ca.shown}

	c := r.load(cert)
	if c.err != nil {
		it.ChainErr = fmt.Errorf("read certificate file %s: %w", cert.shown, c.err)
	} else if c.absent {
		// A trust-bundle-only source (ca_file alone): no certificate was configured.
	} else if it.Chain, it.ChainErr = pki.ParseCertificates(c.data, r.lim); it.ChainErr != nil {
		it.Chain = nil
		it.ChainErr = fmt.Errorf("parse certificate file %s: %w", cert.shown, it.ChainErr)
	}

	k := r.load(key)
	switch {
	case k.err != nil:
		it.KeyErr = fmt.Errorf("read key file %s: %w", key.shown, k.err)
	case !k.absent:
		// pki.ParsePrivateKey keeps only the public half and never quotes its input.
		info, err := pki.ParsePrivateKey(k.data, r.lim)
		clear(k.data)
		if err != nil {
			it.KeyErr = fmt.Errorf("parse key file %s: %w", key.shown, err)
		} else {
			it.Key = &info
		}
	}

	it.CA, it.CAErr = parseCA(ca, r.load(ca), r.lim)
	return it
}

func parseCA(ca fileRef, l loaded, lim pki.Limits) ([]*x509.Certificate, error) {
	switch {
	case l.err != nil:
		return nil, fmt.Errorf("read CA file %s: %w", ca.shown, l.err)
	case l.absent:
		return nil, nil
	}
	certs, err := pki.ParseCertificates(l.data, lim)
	if err != nil {
		return nil, fmt.Errorf("parse CA file %s: %w", ca.shown, err)
	}
	return certs, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
