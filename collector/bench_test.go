package collector

import (
	"crypto/x509"
	"fmt"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/ref"
)

// fleet is a Kubernetes-mode round of the scale: secrets TLS Secrets in 50 namespaces,
// pods Envoy pods each bound to one of them, loaded and served, 10% stale with two findings.
func fleet(secrets, pods int) Round {
	r := Round{Kubernetes: true, Started: t0.Add(-time.Second), Finished: t0}
	leaf := make([]*x509.Certificate, secrets)
	for i := range secrets {
		leaf[i] = cert(fmt.Sprintf("host-%d.example.com", i), int64(100+i))
		ns := fmt.Sprintf("ns-%d", i%50)
		r.Inputs.Desired = append(r.Inputs.Desired, desired.Observation{Ref: ref.Source{Kind: ref.Secret, Namespace: ns, Name: fmt.Sprintf("tls-%d", i)},
			Items: []desired.Item{{Chain: []*x509.Certificate{leaf[i]}}}})
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
				audit.Finding{Code: audit.StaleLoaded, Severity: audit.Critical, Subject: audit.Subject{Envoy: name, Source: o.Ref.String(), Secret: "server_cert"}},
				audit.Finding{Code: audit.StaleServed, Severity: audit.Critical, Subject: audit.Subject{Envoy: name, Source: o.Ref.String(), SNI: leaf[i].Subject.CommonName}})
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
		r.Report.Bindings = append(r.Report.Bindings, audit.Binding{Envoy: name, Source: o.Ref.String(), Secret: "server_cert",
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

// BenchmarkScrapeHTTP is one /metrics request through the handler certdrift serve uses, plain,
// gzipped (what Prometheus asks for) and in the protobuf format (what Prometheus asks for with
// native histograms on).
func BenchmarkScrapeHTTP(b *testing.B) {
	s := NewStore(Options{Now: clock(t0)})
	s.Record(fleet(10000, 500))
	h, err := s.Handler(HandlerOpts{})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, accept, encoding string }{
		{"identity", acceptText, "identity"},
		{"gzip", acceptText, "gzip"},
		{"protobuf", acceptProto, "identity"},
		{"protobuf-gzip", acceptProto, "gzip"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var n int
			for b.Loop() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest("GET", "/metrics", nil)
				req.Header.Set("Accept", tc.accept)
				req.Header.Set("Accept-Encoding", tc.encoding)
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
// pre-rendered objects and the assembled exposition with its gzip member) as heap-MiB: a measurement for docs/benchmarks.md, so a
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
// render the source's object, assemble the exposition again and gzip its text.
func BenchmarkUpdateDesired(b *testing.B) {
	r := fleet(10000, 500)
	s := NewStore(Options{Now: clock(t0)})
	s.Record(r)
	o := r.Inputs.Desired[42]
	i := 0
	for b.Loop() {
		i++
		upd := o
		upd.Items = []desired.Item{{Chain: []*x509.Certificate{cert(fmt.Sprintf("rotated-%d", i), int64(i))}}}
		s.UpdateDesired([]DesiredUpdate{{Observation: upd}}, t0.Add(time.Duration(i)*time.Second))
	}
	b.ReportMetric(float64(len(s.current().gz))/1e3, "gz-KB")
}
