package collector

import (
	"crypto/x509"

	dto "github.com/prometheus/client_model/go"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
)

var (
	certNotBefore = newFamily("certdrift_certificate_not_before_timestamp_seconds",
		"Start of the certificate's validity in the loaded and served views.", dto.MetricType_GAUGE,
		loadedView.base.names, servedView.base.names)
	certNotAfter = newFamily("certdrift_certificate_not_after_timestamp_seconds",
		"End of the certificate's validity, per view (desired, loaded, served).", dto.MetricType_GAUGE,
		desiredView.base.names, loadedView.base.names, servedView.base.names)
	certInfo = newFamily("certdrift_certificate_info",
		"Identity of the certificate seen in a view; fingerprint_sha256 is empty when Envoy's /certs named a certificate seen in no other view.",
		dto.MetricType_GAUGE, desiredView.info.names, loadedView.info.names, servedView.info.names)
)

// Each view labels its certificates with what it knows, and the labels join the views: the same
// certificate (fingerprint_sha256 on the _info series) can be followed from a desired source
// (source) to each Envoy that loaded it (envoy, location: the SDS secret name or certificate file
// Envoy reports) and each endpoint serving it (location: the address handshaken, and the sni
// asked for). namespace is the Envoy's: a desired certificate belongs to no Envoy, and its
// Secret's namespace leads source. The desired view's location is the file (or merged item) in
// local mode, and none in Kubernetes mode, where source already names the Secret. Every label
// costs bytes on each series, and the desired view alone may hold 10,000 Secrets, so the sets
// are minimal: no pod (envoy is "namespace/pod" in Kubernetes mode) and the merged item folded
// into source.
var (
	desiredCertLabels = []string{"view", "source", "location"}
	loadedCertLabels  = []string{"view", "namespace", "source", "envoy", "location"}
	servedCertLabels  = []string{"view", "namespace", "source", "envoy", "location", "sni"}
	certInfoLabels    = []string{"fingerprint_sha256", "serial", "subject", "issuer"}
)

// certView is one view's label sets: of the validity series, and of the _info series.
type certView struct {
	view       string
	base, info *labelIndex
}

func newCertView(view string, names []string) certView {
	return certView{view: view, base: newLabelIndex(names...), info: newLabelIndex(append(append([]string{}, names...), certInfoLabels...)...)}
}

var (
	desiredView = newCertView("desired", desiredCertLabels)
	loadedView  = newCertView("loaded", loadedCertLabels)
	servedView  = newCertView("served", servedCertLabels)
)

// certSeriesSet renders the certificate series of one object, each label set once.
type certSeriesSet struct {
	rs   *rowSet
	seen map[string]bool
}

func newCertSeries(rs *rowSet) *certSeriesSet { return &certSeriesSet{rs: rs, seen: map[string]bool{}} }

// certFacts are what the series of one certificate say.
type certFacts struct {
	fingerprint, serial string
	subject, issuer     string
	notBefore, notAfter int64 // Unix nanoseconds; 0 when unknown
}

func factsOf(c *x509.Certificate) certFacts {
	f := certFacts{fingerprint: pki.Fingerprint(c), subject: c.Subject.String(), issuer: c.Issuer.String(),
		notBefore: nanoOrZero(c.NotBefore.IsZero(), c.NotBefore.UnixNano()), notAfter: nanoOrZero(c.NotAfter.IsZero(), c.NotAfter.UnixNano())}
	if c.SerialNumber != nil {
		f.serial = c.SerialNumber.Text(16)
	}
	return f
}

// add renders one certificate of view v; kv are the view's label pairs besides view itself.
func (s *certSeriesSet) add(v certView, c certFacts, kv ...string) {
	kv = append([]string{"view", v.view}, kv...)
	base := v.base.values(kv...)
	k := joinKey(base)
	if s.seen[k] {
		return
	}
	s.seen[k] = true
	// The desired view has no not-before: nothing alerts on a Secret's start of validity
	// (NOT_YET_VALID is a finding), and at 10,000 Secrets it was 1.5 MB of every scrape. Loaded
	// and served keep it: it tells an old leaf from a new one at a glance.
	if c.notBefore != 0 && v.view != "desired" {
		s.rs.sample(certNotBefore, v.base.names, base, unixNano(c.notBefore))
	}
	if c.notAfter != 0 {
		s.rs.sample(certNotAfter, v.base.names, base, unixNano(c.notAfter))
	}
	info := v.info.values(append(kv, "fingerprint_sha256", c.fingerprint, "serial", c.serial, "subject", c.subject, "issuer", c.issuer)...)
	s.rs.sample(certInfo, v.info.names, info, 1)
}

// desired renders the desired certificates of one source.
func (s *certSeriesSet) desired(o desired.Observation, kubernetes bool) {
	for _, it := range o.Items {
		leaf := desiredLeaf(&it)
		if leaf == nil {
			continue
		}
		loc := ""
		if !kubernetes {
			loc = cmpOr(it.CertPath, it.Name)
		}
		s.add(desiredView, factsOf(leaf), "source", sourceLabel(o.Ref.String(), it.Name), "location", loc)
	}
}

// desiredLeaf is an item's leaf, parsed for this one rendering when it is kept unparsed
// (desired.Lazy): a desired object is rendered only when its source changed (objects.go).
func desiredLeaf(it *desired.Item) *x509.Certificate {
	if it.Lazy == nil {
		if len(it.Chain) == 0 {
			return nil
		}
		return it.Chain[0]
	}
	if len(it.Lazy.Chain) == 0 {
		return nil
	}
	x, err := x509.ParseCertificate(it.Lazy.Chain[0].DER)
	if err != nil {
		return nil // parsed when the Secret was read; unreachable
	}
	return x
}

// loaded renders the certificates one Envoy's admin reports: SDS secrets from config_dump (with
// their whole certificate) and the /certs contexts not delivered by SDS.
func (s *certSeriesSet) loaded(a *envoystate.Snapshot, namespace, envoy string, bs []audit.Binding, known knownCerts) {
	inlined := false
	for _, sec := range a.Secrets {
		if !sec.HasCertificate || len(sec.Chain) == 0 || sec.State == envoystate.SecretWarming {
			continue
		}
		inlined = true
		src, item := "", ""
		for _, b := range bs {
			if b.Loads(sec) {
				src, item = b.Source, b.Item
				break
			}
		}
		s.add(loadedView, factsOf(sec.Chain[0]), "namespace", namespace, "source", sourceLabel(src, item), "envoy", envoy, "location", sec.Name)
	}
	for _, c := range a.Contexts {
		if len(c.Chain) == 0 {
			continue
		}
		d := c.Chain[0]
		// SDS-delivered certificates appear here as "<inline>" and were exposed above, with
		// their fingerprint, from config_dump.
		if inlined && (d.Path == "<inline>" || d.Path == "") {
			continue
		}
		src, item := "", ""
		for _, b := range bs {
			if b.File != "" && b.File == d.Path {
				src, item = b.Source, b.Item
				break
			}
		}
		f := certFacts{notBefore: nanoOrZero(d.ValidFrom.IsZero(), d.ValidFrom.UnixNano()), notAfter: nanoOrZero(d.Expiration.IsZero(), d.Expiration.UnixNano())}
		if d.Serial != nil {
			f.serial = d.Serial.Text(16)
			if k := known.get(d.Serial, d.Expiration); k != nil {
				f = factsOf(k)
			}
		}
		s.add(loadedView, f, "namespace", namespace, "source", sourceLabel(src, item), "envoy", envoy, "location", d.Path)
	}
}

// served renders the leaf of every handshake with one Envoy.
func (s *certSeriesSet) served(results []tlsprobe.Result, namespace, envoy string, bs []audit.Binding) {
	for _, res := range results {
		if len(res.Chain) == 0 {
			continue
		}
		src, item := "", ""
		for _, b := range bs {
			if b.Endpoint == res.Target.Address && (res.Target.SNI == "" || contains(b.SNIs, res.Target.SNI)) {
				src, item = b.Source, b.Item
				break
			}
		}
		s.add(servedView, factsOf(res.Chain[0]), "namespace", namespace, "source", sourceLabel(src, item), "envoy", envoy,
			"location", res.Target.Address, "sni", res.Target.SNI)
	}
}

// sourceLabel names a desired certificate: the source, and the item of a merged source after a
// "#" ("istio-ingressgateway-certs#www.example.com"), so one label joins all views.
func sourceLabel(source, item string) string {
	if item == "" {
		return source
	}
	return source + "#" + item
}

func nanoOrZero(zero bool, n int64) int64 {
	if zero {
		return 0
	}
	return n
}

// unixNano renders a time as fractional seconds since the epoch, as *_timestamp_seconds want.
func unixNano(n int64) float64 { return float64(n) / 1e9 }

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}
