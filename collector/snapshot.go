package collector

import (
	"crypto/x509"
	"math/big"
	"strconv"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/files"
)

// snapshot is one round turned into series: built once per round, read by every scrape.
type snapshot struct {
	finished time.Time
	duration float64
	certs    []certSeries
	// cas are the CA certificates of trust bundles, one per view and fingerprint.
	cas      []caSeries
	findings [][]string
	drift    []driftSeries
	// converging is the number of bindings whose rotation clock is running.
	converging int
	bindings   map[string]int // by state
	// coverage is the audit's account of what the round could judge.
	coverage  audit.Coverage
	sourcesUp []upSeries
	envoysUp  []upSeries
	// kubernetes is Round.Kubernetes: how desired series are labelled (UpdateDesired needs it).
	kubernetes bool
}

type certSeries struct {
	labels []string // certLabels
	// src is the desired source a desired-view series comes from (empty in the other views):
	// UpdateDesired replaces a source's series by it.
	src                 string
	fingerprint, serial string
	subject, issuer     string
	notBefore, notAfter time.Time
}

type driftSeries struct {
	labels []string // driftLabels
	since  time.Time
}

type upSeries struct {
	labels []string
	up     bool
}

// identity is how an Envoy is labelled.
type identity struct{ namespace, workload, pod string }

func envoyIdentities(r Round) map[string]identity {
	ids := map[string]identity{}
	for _, ev := range r.Inputs.Envoys {
		var id identity
		if p := ev.Pod; p != nil {
			id = identity{namespace: p.Namespace, workload: p.Workload, pod: p.Pod}
		}
		ids[ev.Config.Name] = id
	}
	return ids
}

// buildSnapshot derives the series of one round, keeping only the shard's objects. Series are
// de-duplicated on their labels: Envoy's /certs lists one entry per live TLS context, and a
// source may be bound through several paths.
func buildSnapshot(r Round, shard Shard) *snapshot {
	s := &snapshot{bindings: map[string]int{}, kubernetes: r.Kubernetes}
	for _, st := range []string{audit.StateConverged, audit.StateConverging, audit.StateStale, audit.StateUnknown} {
		s.bindings[st] = 0
	}
	ids := envoyIdentities(r)
	seen := map[string]bool{}
	addCert := func(labels []string, c certSeries) {
		k := joinKey(labels)
		if seen[k] {
			return
		}
		seen[k] = true
		c.labels = labels
		s.certs = append(s.certs, c)
	}

	// Known certificates by serial and expiry: /certs gives neither fingerprint nor issuer, so a
	// loaded entry borrows them from the same certificate seen in another view, when there is one.
	known := map[string]*x509.Certificate{}
	remember := func(c *x509.Certificate) {
		if c != nil && c.SerialNumber != nil {
			known[serialKey(c.SerialNumber, c.NotAfter)] = c
		}
	}

	for _, o := range r.Inputs.Desired {
		for _, it := range o.Items {
			if len(it.Chain) > 0 {
				remember(it.Chain[0])
			}
		}
		if !shard.Owns(sourceKey(o.Source.Name)) {
			continue
		}
		for _, c := range desiredSeries(o, r.Kubernetes) {
			addCert(c.labels, c)
		}
	}
	for _, ev := range r.Inputs.Envoys {
		for _, res := range ev.Served {
			if len(res.Chain) > 0 {
				remember(res.Chain[0])
			}
		}
		if ev.Admin != nil {
			for _, sec := range ev.Admin.Secrets {
				if len(sec.Chain) > 0 {
					remember(sec.Chain[0])
				}
			}
		}
	}

	bound := bindingsByEnvoy(r.Report.Bindings)
	for _, ev := range r.Inputs.Envoys {
		name := ev.Config.Name
		if !shard.Owns(name) {
			continue
		}
		id := ids[name]
		bs := bound[name]
		if a := ev.Admin; a != nil {
			s.envoysUp = append(s.envoysUp, upSeries{labels: []string{id.namespace, id.pod, name}, up: a.CertsErr == nil})
			inlined := false
			for _, sec := range a.Secrets {
				if !sec.HasCertificate || len(sec.Chain) == 0 || sec.State == "warming" {
					continue
				}
				inlined = true
				src, item := "", ""
				for _, b := range bs {
					if b.Secret == sec.Name {
						src, item = b.Source, b.Item
						break
					}
				}
				addCert([]string{"loaded", id.namespace, sourceLabel(src, item), name, sec.Name, ""}, fromCert(sec.Chain[0]))
			}
			for _, c := range a.Contexts {
				if len(c.Chain) == 0 {
					continue
				}
				d := c.Chain[0]
				// SDS-delivered certificates appear here as "<inline>" and were exposed above,
				// with their fingerprint, from config_dump.
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
				// A serial Envoy printed that is not hex is junk from the admin, not a label value.
				cs := certSeries{notBefore: d.ValidFrom, notAfter: d.Expiration}
				if d.Serial != nil {
					cs.serial = d.Serial.Text(16)
					if k := known[serialKey(d.Serial, d.Expiration)]; k != nil {
						cs = fromCert(k)
					}
				}
				addCert([]string{"loaded", id.namespace, sourceLabel(src, item), name, d.Path, ""}, cs)
			}
		}
		for _, res := range ev.Served {
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
			addCert([]string{"served", id.namespace, sourceLabel(src, item), name, res.Target.Address, res.Target.SNI}, fromCert(res.Chain[0]))
		}
	}
	s.cas = caSeriesOf(r, shard)
	s.coverage = r.Report.Summary.Coverage
	for name, up := range r.SourcesUp {
		s.sourcesUp = append(s.sourcesUp, upSeries{labels: []string{name}, up: up})
	}
	for _, b := range r.Report.Bindings {
		if shard.Owns(b.Envoy) {
			s.bindings[cmpOr(b.State, audit.StateUnknown)]++
		}
	}

	seenF := map[string]bool{}
	for _, f := range r.Report.Findings {
		key := f.Subject.Envoy
		if key == "" {
			key = sourceKey(f.Subject.Source)
		}
		if !shard.Owns(key) {
			continue
		}
		id := ids[f.Subject.Envoy]
		ns := id.namespace
		if ns == "" {
			ns = sourceNamespace(f.Subject.Source, r.Kubernetes)
		}
		labels := []string{string(f.Code), f.Severity.String(), ns, cmpOr(f.Subject.Workload, id.workload), id.pod,
			f.Subject.Envoy, f.Subject.Source, f.Subject.Secret, f.Subject.SNI}
		if k := joinKey(labels); !seenF[k] {
			seenF[k] = true
			s.findings = append(s.findings, labels)
		}
	}
	return s
}

// desiredSeries are the desired-view series of one source, in Round.Kubernetes labelling.
func desiredSeries(o files.Observation, kubernetes bool) []certSeries {
	var out []certSeries
	for _, it := range o.Items {
		if len(it.Chain) == 0 {
			continue
		}
		// In Kubernetes mode source already names the Secret (and a merged item after "#"),
		// so the item's "namespace/name/key" path would repeat it on 20,000 series: the
		// desired view there has no location. In local mode it is the file.
		loc := ""
		if !kubernetes {
			loc = cmpOr(it.CertPath, it.Name)
		}
		c := fromCert(it.Chain[0])
		// No namespace: on certificate series it is the namespace of the Envoy whose view it is,
		// and a desired certificate belongs to no Envoy. The Secret's namespace is the first part
		// of source ("namespace/name"), which joins the views; repeating it cost 0.44 MB of
		// every scrape at 10,000 Secrets and put the exposition over its 4 MB budget.
		c.labels = []string{"desired", "", sourceLabel(o.Source.Name, it.Name), "", loc, ""}
		c.src = o.Source.Name
		out = append(out, c)
	}
	return out
}

// sourceLabel names a desired certificate: the source, and the item of a merged source after a
// "#" ("istio-ingressgateway-certs#www.example.com"), so one label joins all views.
func sourceLabel(source, item string) string {
	if item == "" {
		return source
	}
	return source + "#" + item
}

func bindingsByEnvoy(bs []audit.Binding) map[string][]audit.Binding {
	m := map[string][]audit.Binding{}
	for _, b := range bs {
		m[b.Envoy] = append(m[b.Envoy], b)
	}
	return m
}

func fromCert(c *x509.Certificate) certSeries {
	cs := certSeries{fingerprint: pki.Fingerprint(c), subject: c.Subject.String(), issuer: c.Issuer.String(),
		notBefore: c.NotBefore, notAfter: c.NotAfter}
	if c.SerialNumber != nil {
		cs.serial = c.SerialNumber.Text(16)
	}
	return cs
}

func serialKey(serial *big.Int, notAfter time.Time) string {
	return serial.Text(16) + "|" + strconv.FormatInt(notAfter.Unix(), 10)
}

func joinKey(labels []string) string {
	n := 0
	for _, l := range labels {
		n += len(l) + 1
	}
	b := make([]byte, 0, n)
	for _, l := range labels {
		b = append(b, l...)
		b = append(b, 0)
	}
	return string(b)
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}
