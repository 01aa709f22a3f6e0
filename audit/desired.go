package audit

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
)

// desiredCert is one desired certificate (a source, or one item of a merged source) as the checks
// use it.
type desiredCert struct {
	source, item string
	obs          *desired.Observation
	// it is the item as given: its certificates may be unparsed (desired.Lazy). Read paths,
	// errors and facts from it; the x509 form through x() or leafX().
	it *desired.Item
	// lf is the leaf's facts (validity, names, serial), nil when there is no leaf: what the
	// scans over every desired certificate read, so that they parse nothing.
	lf        *desired.Facts
	changedAt time.Time
	// full is it with its certificates parsed, once a check needed them (x); ix parses.
	full *desired.Item
	ix   *desiredIndex
}

// hasLeaf reports whether the item has a certificate (parsed or not).
func (d *desiredCert) hasLeaf() bool { return d.lf != nil }

// x is the item with its certificates parsed, kept for the rest of the Run: only the
// certificates an Envoy is bound to, or that changed, are ever parsed (checkDesired parses the
// others without keeping them).
func (d *desiredCert) x() *desired.Item {
	if d.full == nil {
		full := d.it.Load(d.ix.bundles)
		d.full = &full
	}
	return d.full
}

// leafX is the parsed leaf, nil when there is none (or it no longer parses).
func (d *desiredCert) leafX() *x509.Certificate {
	if d.lf == nil {
		return nil
	}
	if x := d.x(); len(x.Chain) > 0 {
		return x.Chain[0]
	}
	return nil
}

// fingerprint is the leaf's SHA-256 in hex, "" without a leaf.
func (d *desiredCert) fingerprint() string {
	return d.it.LeafFingerprint()
}

// host is the leaf for VerifyHostname: the names alone when the leaf is not parsed.
func (d *desiredCert) host() *x509.Certificate {
	if d.full != nil || !d.it.IsLazy() {
		return d.leafX()
	}
	return d.lf.Host()
}

func (d *desiredCert) subject() Subject {
	return Subject{Source: d.source, Item: d.item, File: d.it.CertPath}
}

// name is how the desired cert is written in messages: "source" or "source/item".
func (d *desiredCert) name() string {
	if d.item == "" {
		return d.source
	}
	return d.source + "/" + d.item
}

// desiredIndex finds desired certificates by source/item and by file path.
type desiredIndex struct {
	// bundles parses each shared CA bundle once per Run (desired.Item.Load).
	bundles map[*desired.Cert][]*x509.Certificate
	all     []*desiredCert
	byRef   map[[2]string]*desiredCert
	byPath  map[string]*desiredCert // cert path and CA path, cleaned
	byCA    map[string]*desiredCert // CA path, cleaned
	// byDir finds the items of a directory source by the directory (an SDS watched_directory).
	// A merged source has one item per certificate, so a directory may map to several.
	byDir map[string][]*desiredCert
}

func indexDesired(obs []desired.Observation) *desiredIndex {
	// Sized for one item per source (a Secret), the common case: at 10,000 Secrets, growing
	// these maps item by item was a tenth of an unchanged round's judging.
	n := len(obs)
	ix := &desiredIndex{all: make([]*desiredCert, 0, n), byRef: make(map[[2]string]*desiredCert, n), byPath: make(map[string]*desiredCert, n),
		byCA: make(map[string]*desiredCert, n), byDir: map[string][]*desiredCert{}, bundles: map[*desired.Cert][]*x509.Certificate{}}
	for i := range obs {
		o := &obs[i]
		name := o.Ref.String()
		for j := range o.Items {
			it := &o.Items[j]
			d := &desiredCert{source: name, item: it.Name, obs: o, it: it, changedAt: o.ChangedAt, ix: ix, lf: it.LeafFacts()}
			ix.all = append(ix.all, d)
			ix.byRef[[2]string{d.source, d.item}] = d
			if it.CertPath != "" {
				ix.byPath[filepath.Clean(it.CertPath)] = d
			}
			if it.CAPath != "" {
				ix.byCA[filepath.Clean(it.CAPath)] = d
			}
			if o.Dir != "" {
				dir := filepath.Clean(o.Dir)
				ix.byDir[dir] = append(ix.byDir[dir], d)
			}
		}
	}
	return ix
}

func (ix *desiredIndex) lookup(source, item string) *desiredCert {
	return ix.byRef[[2]string{source, item}]
}

// checkDesired judges the desired view on its own: can it be read, does the key match, is the CA
// bundle able to verify the certificate beside it, and is anything expired or weak.
func (a *auditor) checkDesired(obs []desired.Observation) {
	for i := range obs {
		o := &obs[i]
		name := o.Ref.String()
		if o.Err != nil && errors.Is(o.Err, fs.ErrNotExist) {
			a.reportMissingSource(Subject{Source: name, File: cmpOr(o.Dir, o.CertFile)},
				fmt.Sprintf("desired source %q could not be read: %v", name, o.Err))
		} else if o.Err != nil {
			a.add(Finding{Code: ParseError, Severity: Warning,
				Subject: Subject{Source: name, File: o.Dir},
				Message: fmt.Sprintf("desired source %q could not be read: %v", name, o.Err),
				Advice:  "fix the path or the files; nothing from this source was checked"})
		}
	}
	// Expiry (EXPIRED, EXPIRING, NOT_YET_VALID) is judged for every certificate every round: it
	// is cheap, its messages carry relative times, its thresholds may follow the certificate's
	// lifetime, and it is de-duplicated across sources. The memo covers the rest, which depends
	// on the time only through the certificates' own validity windows.
	//
	// A certificate remembered clean is judged from its facts alone (expiry): it is never parsed.
	// The others are parsed, judged and dropped a chunk at a time, so that a Run that judges
	// every certificate (the first round, a one-shot audit) never holds all of them parsed.
	type pending struct {
		k        memoKey
		memoable bool
		clean    bool // remembered clean: only expiry is judged
		loaded   *desired.Item
		verified *pki.VerifyResult
	}
	all := make([]pending, len(a.desired.all))
	for i, d := range a.desired.all {
		if a.memo != nil {
			all[i].k, all[i].memoable = a.memo.key(d, a.policy)
			all[i].clean = all[i].memoable && a.memo.clean(all[i].k, a.now)
		}
		if !all[i].clean {
			d.it.LoadCA(a.desired.bundles) // each shared bundle parsed once, before the workers read the map
		}
	}
	const chunk = 512
	for lo := 0; lo < len(all); lo += chunk {
		hi := min(lo+chunk, len(all))
		var todo []int
		for i := lo; i < hi; i++ {
			if !all[i].clean {
				todo = append(todo, i)
			}
		}
		// The bundle check is a signature verification per certificate (≈ 0.1 ms each, a second
		// at 10,000 Secrets): done first, on every core, into a slot per certificate. The checks
		// themselves then run in order, so the findings are the same as one by one.
		parallel(len(todo), func(j int) {
			i := todo[j]
			d := a.desired.all[i]
			it := d.it
			if it.IsLazy() {
				l := it.Load(a.desired.bundles) // every bundle is in the map: read only
				it = &l
			}
			all[i].loaded = it
			if len(it.Chain) > 0 && it.Chain[0] != nil && len(it.CA) > 0 {
				res := pki.Verify(it.Chain[0], it.Chain[1:], it.CA, a.now, x509.ExtKeyUsageAny)
				all[i].verified = &res
			}
		})
		for i := lo; i < hi; i++ {
			p, d := &all[i], a.desired.all[i]
			if !p.clean {
				before := len(a.findings)
				a.checkDesiredItem(d, p.loaded, p.verified)
				if p.memoable && len(a.findings) == before {
					a.memo.remember(p.k, d, a.now)
				}
				if len(p.loaded.Chain) > 0 && p.loaded.Chain[0] != nil {
					a.checkValidity("desired", d.subject(), p.loaded.Chain, false)
				}
				p.loaded, p.verified = nil, nil
				continue
			}
			if d.it.IsLazy() {
				a.checkValidityFacts("desired", d.subject(), d.it.Lazy.Chain)
			} else if d.hasLeaf() {
				a.checkValidity("desired", d.subject(), d.it.Chain, false)
			}
		}
	}
}

// parallel calls f(0) … f(n-1) on up to GOMAXPROCS goroutines and returns when all have
// returned. f must only write to its own index's slot.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// checkDesiredItem judges one desired certificate on its own, all but its expiry (checkDesired):
// it is d's item with its certificates parsed, verified its leaf verified against its CA bundle
// (nil without a bundle).
func (a *auditor) checkDesiredItem(d *desiredCert, it *desired.Item, verified *pki.VerifyResult) {
	for _, e := range []struct {
		err  error
		file string
		what string
	}{{it.ChainErr, it.CertPath, "certificate"}, {it.KeyErr, it.KeyPath, "private key"}, {it.CAErr, it.CAPath, "CA bundle"}} {
		if e.err != nil && errors.Is(e.err, fs.ErrNotExist) {
			s := d.subject()
			s.File = e.file
			a.reportMissingSource(s, fmt.Sprintf("%s of %s: %s does not exist", e.what, d.name(), e.file))
		} else if e.err != nil {
			s := d.subject()
			s.File = e.file
			a.add(Finding{Code: ParseError, Severity: Warning, Subject: s,
				Message: fmt.Sprintf("%s of %s in %s: %v", e.what, d.name(), e.file, e.err),
				Advice:  "replace the file with valid PEM; the checks that need it were skipped"})
		}
	}
	if len(it.CA) > 0 {
		a.checkBundleHygiene(d.subject(), it.CAPath, it.CA)
	}
	if len(it.Chain) == 0 || it.Chain[0] == nil {
		return
	}
	leaf := it.Chain[0]
	if it.Key != nil && !pki.KeyMatches(leaf, it.Key.Public) {
		a.add(Finding{Code: KeyMismatch, Severity: Critical, Subject: d.subject(),
			Message:  fmt.Sprintf("private key %s does not match certificate %s", it.KeyPath, it.CertPath),
			Advice:   "Envoy will refuse this pair; re-issue the certificate or restore the matching key",
			Evidence: map[string]string{"cert_fingerprint": pki.Fingerprint(leaf), "cert_spki_sha256": pki.SPKIHash(leaf), "key_algorithm": it.Key.Algorithm}})
	}
	a.checkWeak("desired", d.subject(), leaf)
	if len(it.CA) > 0 && verified != nil {
		a.reportBundleGap(d.subject(), Critical, *verified, leaf, it.CA, fmt.Sprintf("the CA bundle %s beside it", it.CAPath))
	}
}

// reportMissingSource reports SOURCE_MISSING: something the configuration names that is not
// there, so nothing about it was judged.
func (a *auditor) reportMissingSource(s Subject, what string) {
	a.add(Finding{Code: SourceMissing, Severity: Warning, Subject: s,
		Evidence: map[string]string{"reason": "not_found"},
		Message:  what + "; nothing about it was judged",
		Advice:   "fix the path or name in the configuration, or create it; if a filter (--secret-selector, --secret-type, --exclude-namespace) leaves it out, widen the filter"})
}

// checkBundleCovers reports CA_BUNDLE_GAP when bundle cannot verify leaf (through the given
// intermediates) at the audit time.
func (a *auditor) checkBundleCovers(s Subject, sev Severity, bundle []*x509.Certificate, leaf *x509.Certificate, intermediates []*x509.Certificate, bundleName string) {
	a.reportBundleGap(s, sev, pki.Verify(leaf, intermediates, bundle, a.now, x509.ExtKeyUsageAny), leaf, bundle, bundleName)
}

// reportBundleGap reports CA_BUNDLE_GAP when res, the verification of leaf against bundle,
// failed.
func (a *auditor) reportBundleGap(s Subject, sev Severity, res pki.VerifyResult, leaf *x509.Certificate, bundle []*x509.Certificate, bundleName string) {
	if res.OK {
		return
	}
	ev := map[string]string{
		"leaf_fingerprint": pki.Fingerprint(leaf),
		"leaf_issuer":      leaf.Issuer.String(),
		"bundle_size":      fmt.Sprint(len(bundle)),
	}
	if res.Err != nil {
		ev["reason"] = res.Err.Error()
	}
	a.add(Finding{Code: CABundleGap, Severity: sev, Subject: s, Evidence: ev,
		Message: fmt.Sprintf("%s does not verify certificate %q (issuer %q)", bundleName, certNameOf(leaf), leaf.Issuer.CommonName),
		Advice:  "add the new issuer to the bundle before rolling out leaves it signed (bundle [newCA, oldCA] during a CA rotation)"})
}

func (a *auditor) checkBundleHygiene(s Subject, file string, bundle []*x509.Certificate) {
	for _, is := range pki.CheckBundle(bundle, a.now, a.policy.MaxBundleCAs) {
		sev := Info
		if is.Kind == pki.BundleExpired || is.Kind == pki.BundleTooMany || is.Kind == pki.BundleNotCA {
			sev = Warning
		}
		s2 := s
		s2.File = file
		a.add(Finding{Code: CABundleHygiene, Severity: sev, Subject: s2,
			Message:  fmt.Sprintf("CA bundle %s: %s", file, is.Message),
			Advice:   "remove expired, duplicate and unneeded CAs from the bundle once no live leaf depends on them",
			Evidence: map[string]string{"issue": string(is.Kind)}})
	}
}
