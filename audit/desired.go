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
	it           *desired.Item
	leaf         *x509.Certificate // nil when the certificate file did not parse
	changedAt    time.Time
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
	all    []*desiredCert
	byRef  map[[2]string]*desiredCert
	byPath map[string]*desiredCert // cert path and CA path, cleaned
	byCA   map[string]*desiredCert // CA path, cleaned
	// byDir finds the items of a directory source by the directory (an SDS watched_directory).
	// A merged source has one item per certificate, so a directory may map to several.
	byDir map[string][]*desiredCert
}

func indexDesired(obs []desired.Observation) *desiredIndex {
	ix := &desiredIndex{byRef: map[[2]string]*desiredCert{}, byPath: map[string]*desiredCert{}, byCA: map[string]*desiredCert{}, byDir: map[string][]*desiredCert{}}
	for i := range obs {
		o := &obs[i]
		name := o.Ref.String()
		for j := range o.Items {
			it := &o.Items[j]
			d := &desiredCert{source: name, item: it.Name, obs: o, it: it, changedAt: o.ChangedAt}
			if len(it.Chain) > 0 {
				d.leaf = it.Chain[0]
			}
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
	type pending struct {
		d        *desiredCert
		k        memoKey
		memoable bool
		clean    bool // remembered clean: only expiry is judged
	}
	all := make([]pending, len(a.desired.all))
	var todo []int // indexes of all judged in full
	for i, d := range a.desired.all {
		p := pending{d: d}
		if a.memo != nil {
			p.k, p.memoable = a.memo.key(d, a.policy)
			p.clean = p.memoable && a.memo.clean(p.k, a.now)
		}
		all[i] = p
		if !p.clean {
			todo = append(todo, i)
		}
	}
	// The bundle check is a signature verification per certificate (≈ 0.1 ms each, a second at
	// 10,000 Secrets): done first, on every core, into a slot per certificate. The checks
	// themselves then run in order, so the findings are the same as one by one.
	verified := make([]*pki.VerifyResult, len(all))
	parallel(len(todo), func(j int) {
		i := todo[j]
		d := all[i].d
		if d.leaf != nil && len(d.it.CA) > 0 {
			res := pki.Verify(d.leaf, d.it.Chain[1:], d.it.CA, a.now, x509.ExtKeyUsageAny)
			verified[i] = &res
		}
	})
	for i, p := range all {
		if !p.clean {
			before := len(a.findings)
			a.checkDesiredItem(p.d, verified[i])
			if p.memoable && len(a.findings) == before {
				a.memo.remember(p.k, p.d, a.now)
			}
		}
		if p.d.leaf != nil {
			a.checkValidity("desired", p.d.subject(), p.d.it.Chain, false)
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

// checkDesiredItem judges one desired certificate on its own, all but its expiry (checkDesired);
// verified is its leaf verified against its CA bundle (nil without a bundle).
func (a *auditor) checkDesiredItem(d *desiredCert, verified *pki.VerifyResult) {
	it := d.it
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
	if d.leaf == nil {
		return
	}
	if it.Key != nil && !pki.KeyMatches(d.leaf, it.Key.Public) {
		a.add(Finding{Code: KeyMismatch, Severity: Critical, Subject: d.subject(),
			Message:  fmt.Sprintf("private key %s does not match certificate %s", it.KeyPath, it.CertPath),
			Advice:   "Envoy will refuse this pair; re-issue the certificate or restore the matching key",
			Evidence: map[string]string{"cert_fingerprint": pki.Fingerprint(d.leaf), "cert_spki_sha256": pki.SPKIHash(d.leaf), "key_algorithm": it.Key.Algorithm}})
	}
	a.checkWeak("desired", d.subject(), d.leaf)
	if len(it.CA) > 0 && verified != nil {
		a.reportBundleGap(d.subject(), Critical, *verified, d.leaf, it.CA, fmt.Sprintf("the CA bundle %s beside it", it.CAPath))
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
