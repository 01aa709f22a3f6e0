package collector

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/certs"
)

// TestUnparsedDesiredExposesAlike: a round whose desired certificates are kept unparsed
// (desired.Lazy, as the Kubernetes mode hands them) exposes byte for byte what the same round
// with them parsed does — the desired series, the CA series of their bundles, and the /certs
// entries that borrow fingerprint and issuer from a desired certificate — round after round, as
// desired objects are reused or rendered again.
func TestUnparsedDesiredExposesAlike(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("lazy-ca"))
	inter := ca.Intermediate(t, certs.WithCommonName("lazy-inter"))
	a := inter.Leaf(t, certs.WithDNSNames("a.example.com"))
	b := ca.Leaf(t, certs.WithDNSNames("b.example.com"))
	b2 := ca.Leaf(t, certs.WithDNSNames("b.example.com"))
	round := func(at time.Time, bLeaf *certs.Leaf) Round {
		r := Round{Kubernetes: true, Started: at.Add(-time.Second), Finished: at, SourcesUp: map[string]bool{"kubernetes": true}}
		r.Inputs.Desired = []desired.Observation{
			{Ref: ref.Source{Kind: ref.Secret, Namespace: "ns", Name: "a"}, Items: []desired.Item{{Chain: a.Chain(), CA: []*x509.Certificate{ca.Cert}}}},
			{Ref: ref.Source{Kind: ref.Secret, Namespace: "ns", Name: "b"}, Items: []desired.Item{{Chain: bLeaf.Chain(), CA: []*x509.Certificate{ca.Cert}}}},
			{Ref: ref.Source{Kind: ref.ConfigMap, Namespace: "ns", Name: "bundle"}, Items: []desired.Item{{Name: "ca.crt", CA: []*x509.Certificate{ca.Cert, inter.Cert}}}},
		}
		detail := func(c *x509.Certificate, path string) envoystate.CertDetail {
			return envoystate.CertDetail{Path: path, Serial: c.SerialNumber, ValidFrom: c.NotBefore, Expiration: c.NotAfter}
		}
		// A static context: /certs names the files and gives serials only, so the leaf's and
		// the CA's fingerprints and issuers are borrowed from the desired view.
		r.Inputs.Envoys = []audit.EnvoyView{{Config: config.Envoy{Name: "ns/gw-0"},
			Pod: &audit.PodContext{Namespace: "ns", Pod: "gw-0", Workload: "Deployment/gw"},
			Admin: &envoystate.Snapshot{AdminURL: "http://10.0.0.1:9901", Contexts: []envoystate.TLSContext{{
				Chain: []envoystate.CertDetail{detail(a.Cert, "/secret/tls.crt")}, CA: []envoystate.CertDetail{detail(ca.Cert, "/secret/ca.crt")}}}},
			// Served another leaf: the loaded entry can borrow only from the desired view.
			Served: []tlsprobe.Result{{Target: tlsprobe.Target{Address: "10.0.0.1:443", SNI: "a.example.com"}, Chain: b2.Chain(), Duration: time.Millisecond}}}}
		r.Report.Bindings = []audit.Binding{{Envoy: "ns/gw-0", Source: "ns/a", File: "/secret/tls.crt", Endpoint: "10.0.0.1:443",
			SNIs: []string{"a.example.com"}, Origin: audit.OriginPath, State: audit.StateConverged}}
		return r
	}
	parsed, unparsed := NewStore(Options{Now: clock(t0.Add(time.Hour))}), NewStore(Options{Now: clock(t0.Add(time.Hour))})
	for i, r := range []Round{round(t0, b), round(t0.Add(time.Minute), b), round(t0.Add(2*time.Minute), b2)} {
		lr := r
		lr.Inputs.Desired = desired.Unparsed(r.Inputs.Desired)
		for _, o := range lr.Inputs.Desired {
			for _, it := range o.Items {
				if it.Lazy == nil {
					t.Fatalf("round %d: %s was not turned unparsed", i, o.Ref)
				}
			}
		}
		parsed.Record(r)
		unparsed.Record(lr)
		var want, got bytes.Buffer
		if err := parsed.current().writeText(&want); err != nil {
			t.Fatal(err)
		}
		if err := unparsed.current().writeText(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(want.Bytes(), []byte(`issuer="CN=lazy-inter,`)) || !bytes.Contains(want.Bytes(), []byte(`view="loaded"`)) {
			t.Fatalf("round %d: the fixture exposes no loaded entry borrowing its issuer:\n%s", i, want.String())
		}
		if !bytes.Equal(want.Bytes(), got.Bytes()) {
			t.Errorf("round %d: unparsed desired certificates exposed differently:\n got %s\nwant %s", i, got.String(), want.String())
		}
	}
}
