package collector

import (
	"cmp"
	"crypto/x509"
	"maps"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// caLabels identify a CA certificate, not where it was found: one CA shared by 10,000 Secrets'
// ca.crt is one series per family, not 10,000. serial is there for the CAs Envoy's /certs lists
// that no other view has a copy of: /certs gives no fingerprint, so their fingerprint_sha256 is
// empty and the serial tells them apart.
var (
	caLabels     = newLabelIndex("view", "fingerprint_sha256", "serial")
	caInfoLabels = newLabelIndex("view", "fingerprint_sha256", "serial", "subject", "issuer")
)

var (
	caNotAfter = newFamily("certdrift_ca_certificate_not_after_timestamp_seconds",
		"End of validity of a CA certificate in a trust bundle, per view (desired: Secret ca.crt, ConfigMap bundles, CA files; loaded: Envoy validation contexts), one series per CA.",
		dto.MetricType_GAUGE, caLabels.names)
	caInfo = newFamily("certdrift_ca_certificate_info",
		"Identity of a CA certificate in a trust bundle (value 1); join leaves on issuer = subject.", dto.MetricType_GAUGE, caInfoLabels.names)
	caBundles = newFamily("certdrift_ca_certificate_bundles",
		"Trust bundles holding the CA: desired bundles (Secret or ConfigMap keys, CA files) or Envoys whose validation contexts hold it.",
		dto.MetricType_GAUGE, caLabels.names)
)

// caSeries is one CA certificate of one view, with the number of bundles that hold it.
type caSeries struct {
	view, fingerprint, serial string
	subject, issuer           string
	notAfter                  time.Time
	bundles                   int
}

// renderCAs renders the CA series of one view into its object.
func renderCAs(rs *rowSet, cas []caSeries) {
	for _, ca := range cas {
		base := caLabels.values("view", ca.view, "fingerprint_sha256", ca.fingerprint, "serial", ca.serial)
		rs.sample(caNotAfter, caLabels.names, base, unixNano(ca.notAfter.UnixNano()))
		rs.sample(caInfo, caInfoLabels.names, caInfoLabels.values("view", ca.view, "fingerprint_sha256", ca.fingerprint,
			"serial", ca.serial, "subject", ca.subject, "issuer", ca.issuer), 1)
		rs.sample(caBundles, caLabels.names, base, float64(ca.bundles))
	}
}

// caIndex gathers the CAs of one view. A bundle is counted once per CA however often the CA
// appears in it (Envoy's /certs repeats a context's CA once per live context).
type caIndex struct {
	view string
	byID map[string]*caSeries
	// fps caches fingerprints by certificate: in Kubernetes mode the Secrets sharing a bundle
	// share its parsed certificates, so 10,000 ca.crt cost one SHA-256, not 10,000.
	fps map[*x509.Certificate]string
}

func newCAIndex(view string, fps map[*x509.Certificate]string) *caIndex {
	return &caIndex{view: view, byID: map[string]*caSeries{}, fps: fps}
}

func (x *caIndex) fingerprint(c *x509.Certificate) string {
	fp, ok := x.fps[c]
	if !ok {
		fp = pki.Fingerprint(c)
		x.fps[c] = fp
	}
	return fp
}

// bundle counts one bundle holding certs.
func (x *caIndex) bundle(certs []*x509.Certificate) {
	var seen map[string]bool
	if len(certs) > 1 {
		seen = map[string]bool{}
	}
	for _, c := range certs {
		if c == nil {
			continue
		}
		fp := x.fingerprint(c)
		if seen != nil {
			if seen[fp] {
				continue
			}
			seen[fp] = true
		}
		if have := x.byID[fp]; have != nil {
			have.bundles++ // described already: no subject and issuer strings for 10,000 ca.crt
			continue
		}
		x.add(fp, caFromCert(x.view, fp, c))
	}
}

// add counts one more bundle for the CA identified by id; the first sighting describes it.
func (x *caIndex) add(id string, ca caSeries) {
	if have := x.byID[id]; have != nil {
		have.bundles++
		return
	}
	ca.bundles = 1
	x.byID[id] = &ca
}

func (x *caIndex) series() []caSeries {
	out := make([]caSeries, 0, len(x.byID))
	for _, ca := range x.byID {
		out = append(out, *ca)
	}
	slices.SortFunc(out, func(a, b caSeries) int {
		return cmp.Or(cmp.Compare(a.fingerprint, b.fingerprint), cmp.Compare(a.serial, b.serial))
	})
	return out
}

func caFromCert(view, fp string, c *x509.Certificate) caSeries {
	ca := caSeries{view: view, fingerprint: fp, subject: c.Subject.String(), issuer: c.Issuer.String(), notAfter: c.NotAfter}
	if c.SerialNumber != nil {
		ca.serial = c.SerialNumber.Text(16)
	}
	return ca
}

// envoy counts, for one Envoy, every CA its validation contexts hold: the trusted CAs and SPIFFE
// bundles of validation secrets in config_dump (whole certificates), and the CA entries of
// /certs, which carry only serial and validity — matched to a CA certificate seen elsewhere
// (known, by serial and expiry) to borrow its fingerprint, else exposed with an empty one.
func (x *caIndex) envoy(a *envoystate.Snapshot, known knownCerts) {
	var certs []*x509.Certificate
	for _, sec := range a.Secrets {
		if !sec.HasValidation || sec.State == envoystate.SecretWarming {
			continue
		}
		certs = append(certs, sec.ValidationCA...)
		for _, td := range slices.Sorted(maps.Keys(sec.SPIFFEBundles)) {
			certs = append(certs, sec.SPIFFEBundles[td]...)
		}
	}
	unidentified := map[string]caSeries{} // by serial
	for _, tc := range a.Contexts {
		for _, d := range tc.CA {
			if d.Serial == nil {
				continue
			}
			if k := known.get(d.Serial, d.Expiration); k != nil {
				certs = append(certs, k)
				continue
			}
			serial := d.Serial.Text(16)
			if have, ok := unidentified[serial]; !ok || d.Expiration.Before(have.notAfter) {
				unidentified[serial] = caSeries{view: x.view, serial: serial, notAfter: d.Expiration}
			}
		}
	}
	x.bundle(certs)
	// Two unidentified CAs with one serial share a series, which keeps the earlier expiry: the
	// one an alert must see.
	for _, serial := range slices.Sorted(maps.Keys(unidentified)) {
		ca := unidentified[serial]
		id := "serial:" + serial
		if have := x.byID[id]; have != nil {
			have.notAfter = minTime(have.notAfter, ca.notAfter)
		}
		x.add(id, ca)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// caSeriesOf derives the CA series of a round for the shard's own sources and Envoys, per view.
func caSeriesOf(r Round, shard Shard) (desiredCAs, loadedCAs []caSeries) {
	fps := map[*x509.Certificate]string{}
	wanted, loaded := newCAIndex("desired", fps), newCAIndex("loaded", fps)
	// Every CA certificate of the round by serial and expiry, for /certs entries to borrow from.
	known := knownCerts{}
	remember := func(cs []*x509.Certificate) {
		for _, c := range cs {
			known.add(c)
		}
	}
	// Bundles kept unparsed (desired.Lazy) are parsed once per round each: items sharing one
	// share its slice.
	bundles := map[*desired.Cert][]*x509.Certificate{}
	caOf := func(it desired.Item) []*x509.Certificate {
		if it.Lazy == nil {
			return it.CA
		}
		it.LoadCA(bundles)
		if len(it.Lazy.CA) == 0 {
			return nil
		}
		return bundles[&it.Lazy.CA[0]]
	}
	desiredKnown := r.Inputs.Desired
	if !readsCerts(r) {
		desiredKnown = nil // no /certs entry will ask
	}
	for _, o := range desiredKnown {
		for _, it := range o.Items {
			remember(caOf(it))
		}
	}
	for _, ev := range r.Inputs.Envoys {
		if ev.Admin == nil {
			continue
		}
		for _, sec := range ev.Admin.Secrets {
			remember(sec.ValidationCA)
		}
	}
	for _, o := range r.Inputs.Desired {
		if !shard.Owns(o.Ref.Key()) {
			continue
		}
		for _, it := range o.Items {
			if ca := caOf(it); len(ca) > 0 {
				wanted.bundle(ca)
			}
		}
	}
	for _, ev := range r.Inputs.Envoys {
		if ev.Admin != nil && shard.Owns(ev.Config.Name) {
			loaded.envoy(ev.Admin, known)
		}
	}
	return wanted.series(), loaded.series()
}
