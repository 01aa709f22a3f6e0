package collector

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/files"
	"github.com/certdrift/certdrift/probe/tlsprobe"
)

// fleet is a Kubernetes-mode round of the scale: secrets TLS Secrets in 50 namespaces,
// pods Envoy pods each bound to one of them, loaded and served, 10% stale with two findings.
func fleet(secrets, pods int) Round {
	r := Round{Kubernetes: true, Started: t0.Add(-time.Second), Finished: t0}
	leaf := make([]*x509.Certificate, secrets)
	for i := range secrets {
		leaf[i] = cert(fmt.Sprintf("host-%d.example.com", i), int64(100+i))
		ns := fmt.Sprintf("ns-%d", i%50)
		r.Inputs.Desired = append(r.Inputs.Desired, files.Observation{Source: files.Source{Name: fmt.Sprintf("%s/tls-%d", ns, i)},
			Items: []files.Item{{Chain: []*x509.Certificate{leaf[i]}}}})
	}
	for p := range pods {
		i := p % secrets
		o := r.Inputs.Desired[i]
		ns := fmt.Sprintf("ns-%d", i%50)
		name := fmt.Sprintf("%s/gw-%d", ns, p)
		loaded := leaf[i]
		state := audit.StateConverged
		if p%10 == 0 {
			loaded, state = leaf[(i+1)%secrets], audit.StateStale
			r.Report.Findings = append(r.Report.Findings,
				audit.Finding{Code: audit.StaleLoaded, Severity: audit.Critical, Subject: audit.Subject{Envoy: name, Source: o.Source.Name, Secret: "server_cert"}},
				audit.Finding{Code: audit.StaleServed, Severity: audit.Critical, Subject: audit.Subject{Envoy: name, Source: o.Source.Name, SNI: leaf[i].Subject.CommonName}})
		}
		addr := fmt.Sprintf("10.0.%d.%d:8443", p/250, p%250)
		r.Inputs.Envoys = append(r.Inputs.Envoys, audit.EnvoyView{
			Config: config.Envoy{Name: name},
			Pod:    &audit.PodContext{Namespace: ns, Pod: fmt.Sprintf("gw-%d", p), Workload: "Deployment/gw"},
			Admin: &envoystate.Snapshot{Secrets: []envoystate.Secret{{Name: "server_cert", State: envoystate.SecretActive,
				HasCertificate: true, Chain: []*x509.Certificate{loaded}}}},
			Served: []tlsprobe.Result{{Target: tlsprobe.Target{Address: addr, SNI: leaf[i].Subject.CommonName},
				Chain: []*x509.Certificate{loaded}, Duration: 3 * time.Millisecond}},
		})
		r.Report.Bindings = append(r.Report.Bindings, audit.Binding{Envoy: name, Source: o.Source.Name, Secret: "server_cert",
			Endpoint: addr, SNIs: []string{leaf[i].Subject.CommonName}, Origin: audit.OriginSDSName, State: state})
	}
	return r
}

// BenchmarkRecord is the per-round cost: building the snapshot and advancing the clocks.
func BenchmarkRecord(b *testing.B) {
	r := fleet(10000, 500)
	s := NewStore(Options{Now: clock(t0)})
	b.ResetTimer()
	for b.Loop() {
		s.Record(r)
	}
}

// BenchmarkScrape is what one /metrics request costs: gather and encode the text format.
func BenchmarkScrape(b *testing.B) {
	b.Run("Registry", func(b *testing.B) { benchScrape(b, false) })
	b.Run("Gatherer", func(b *testing.B) { benchScrape(b, true) })
}

func benchScrape(b *testing.B, cached bool) {
	s := NewStore(Options{Now: clock(t0)})
	s.Record(fleet(10000, 500))
	var reg prometheus.Gatherer
	var err error
	if cached {
		reg, err = s.Gatherer()
	} else {
		reg, err = s.Registry()
	}
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	b.ResetTimer()
	for b.Loop() {
		buf.Reset()
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/exposition")
}

// BenchmarkScrapeHTTP is one /metrics request through promhttp as certdrift serve configures
// it, with and without gzip (Prometheus asks for gzip).
func BenchmarkScrapeHTTP(b *testing.B) {
	s := NewStore(Options{Now: clock(t0)})
	s.Record(fleet(10000, 500))
	g, err := s.Gatherer()
	if err != nil {
		b.Fatal(err)
	}
	h, err := s.Handler(promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	for _, enc := range []string{"identity", "gzip"} {
		b.Run(enc, func(b *testing.B) {
			var n int
			for b.Loop() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest("GET", "/metrics", nil)
				req.Header.Set("Accept-Encoding", enc)
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("status %d", rec.Code)
				}
				n = rec.Body.Len()
			}
			b.ReportMetric(float64(n), "bytes/response")
		})
	}
}

// BenchmarkFleetHeap reports the Go heap a 10,000-Secret round keeps (snapshot, tracking and the
// rendered certificate families) as heap-MiB: a measurement for docs/benchmarks.md, so a
// benchmark rather than a test that builds the fleet in every CI run and asserts nothing.
func BenchmarkFleetHeap(b *testing.B) {
	r := fleet(10000, 500)
	var kept int64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := NewStore(Options{Now: clock(t0)})
		s.Record(r)
		runtime.GC()
		runtime.ReadMemStats(&after)
		kept = int64(after.HeapAlloc) - int64(before.HeapAlloc)
		runtime.KeepAlive(s)
	}
	b.ReportMetric(float64(kept)/(1<<20), "heap-MiB")
}

// BenchmarkUpdateDesired is the cost of one Secret change between rounds at the scale:
// copy the snapshot, splice its text, gzip it again.
func BenchmarkUpdateDesired(b *testing.B) {
	r := fleet(10000, 500)
	s := NewStore(Options{Now: clock(t0)})
	s.Record(r)
	o := r.Inputs.Desired[42]
	i := 0
	for b.Loop() {
		i++
		upd := o
		upd.Items = []files.Item{{Chain: []*x509.Certificate{cert(fmt.Sprintf("rotated-%d", i), int64(i))}}}
		s.UpdateDesired([]DesiredUpdate{{Observation: upd}}, t0.Add(time.Duration(i)*time.Second))
	}
}
