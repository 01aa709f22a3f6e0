package collector

import (
	"crypto/x509"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/ref"

	"github.com/certdrift/certdrift/audit"
)

// copyOf is the same certificate parsed again: another pointer, the same bytes.
func copyOf(c *x509.Certificate) *x509.Certificate {
	d := *c
	return &d
}

func caDetail(c *x509.Certificate) envoystate.CertDetail {
	return envoystate.CertDetail{Path: "/etc/ca.crt", Serial: c.SerialNumber, ValidFrom: c.NotBefore, Expiration: c.NotAfter}
}

// caRound is a Kubernetes-mode round whose trust bundles share CAs in every way they can.
func caRound(root, old *x509.Certificate) Round {
	r := Round{Kubernetes: true, Started: t0.Add(-time.Second), Finished: t0}
	r.Inputs.Desired = []desired.Observation{
		{Ref: ref.Source{Kind: ref.Secret, Namespace: "ns-a", Name: "tls-a"}, Items: []desired.Item{{Chain: []*x509.Certificate{cert("a", 30)}, CA: []*x509.Certificate{root, old}}}},
		// The same root parsed from another Secret: deduplicated by fingerprint, not by pointer.
		{Ref: ref.Source{Kind: ref.Secret, Namespace: "ns-b", Name: "tls-b"}, Items: []desired.Item{{Chain: []*x509.Certificate{cert("b", 40)}, CA: []*x509.Certificate{copyOf(root)}}}},
		{Ref: ref.Source{Kind: ref.ConfigMap, Namespace: "ns-a", Name: "root"}, Items: []desired.Item{
			{Name: "root-cert.pem", CA: []*x509.Certificate{root}},
			// A bundle listing the root twice still holds it once.
			{Name: "dup.pem", CA: []*x509.Certificate{root, copyOf(root)}},
		}},
	}
	unknown := envoystate.CertDetail{Path: "/etc/other-ca.crt", Serial: big.NewInt(0x99), Expiration: t0.Add(48 * time.Hour)}
	r.Inputs.Envoys = []audit.EnvoyView{
		{Config: config.Envoy{Name: "ns-a/gw-0"}, Pod: &audit.PodContext{Namespace: "ns-a", Pod: "gw-0"},
			Admin: &envoystate.Snapshot{
				Secrets: []envoystate.Secret{
					{Name: "validation", State: envoystate.SecretActive, HasValidation: true, ValidationCA: []*x509.Certificate{copyOf(root)}},
					// Not yet in use: not loaded.
					{Name: "next-validation", State: envoystate.SecretWarming, HasValidation: true, ValidationCA: []*x509.Certificate{cert("next-ca", 900)}},
				},
				// /certs repeats the CA per context; and names one no other view has.
				Contexts: []envoystate.TLSContext{{CA: []envoystate.CertDetail{caDetail(root)}}, {CA: []envoystate.CertDetail{caDetail(root), unknown}}},
			}},
		{Config: config.Envoy{Name: "ns-a/gw-1"}, Pod: &audit.PodContext{Namespace: "ns-a", Pod: "gw-1"},
			Admin: &envoystate.Snapshot{Contexts: []envoystate.TLSContext{{CA: []envoystate.CertDetail{caDetail(old), unknown}}}}},
	}
	return r
}

func TestCACertificatesGolden(t *testing.T) {
	root, old := cert("root-ca", 3650), cert("old-ca", 100)
	s := NewStore(Options{Now: clock(t0)})
	s.Record(caRound(root, old))
	golden := expand(`
# HELP certdrift_ca_certificate_bundles Trust bundles holding the CA: desired bundles (Secret or ConfigMap keys, CA files) or Envoys whose validation contexts hold it.
# TYPE certdrift_ca_certificate_bundles gauge
certdrift_ca_certificate_bundles{fingerprint_sha256="",serial="99",view="loaded"} 2
certdrift_ca_certificate_bundles{fingerprint_sha256="{fp:old-ca}",serial="64",view="desired"} 1
certdrift_ca_certificate_bundles{fingerprint_sha256="{fp:old-ca}",serial="64",view="loaded"} 1
certdrift_ca_certificate_bundles{fingerprint_sha256="{fp:root-ca}",serial="e42",view="desired"} 4
certdrift_ca_certificate_bundles{fingerprint_sha256="{fp:root-ca}",serial="e42",view="loaded"} 1
# HELP certdrift_ca_certificate_info Identity of a CA certificate in a trust bundle (value 1); join leaves on issuer = subject.
# TYPE certdrift_ca_certificate_info gauge
certdrift_ca_certificate_info{fingerprint_sha256="",issuer="",serial="99",subject="",view="loaded"} 1
certdrift_ca_certificate_info{fingerprint_sha256="{fp:old-ca}",issuer="CN=test-ca",serial="64",subject="CN=old-ca",view="desired"} 1
certdrift_ca_certificate_info{fingerprint_sha256="{fp:old-ca}",issuer="CN=test-ca",serial="64",subject="CN=old-ca",view="loaded"} 1
certdrift_ca_certificate_info{fingerprint_sha256="{fp:root-ca}",issuer="CN=test-ca",serial="e42",subject="CN=root-ca",view="desired"} 1
certdrift_ca_certificate_info{fingerprint_sha256="{fp:root-ca}",issuer="CN=test-ca",serial="e42",subject="CN=root-ca",view="loaded"} 1
# HELP certdrift_ca_certificate_not_after_timestamp_seconds End of validity of a CA certificate in a trust bundle, per view (desired: Secret ca.crt, ConfigMap bundles, CA files; loaded: Envoy validation contexts), one series per CA.
# TYPE certdrift_ca_certificate_not_after_timestamp_seconds gauge
certdrift_ca_certificate_not_after_timestamp_seconds{fingerprint_sha256="",serial="99",view="loaded"} 1.7955216e+09
certdrift_ca_certificate_not_after_timestamp_seconds{fingerprint_sha256="{fp:old-ca}",serial="64",view="desired"} 1.8039888e+09
certdrift_ca_certificate_not_after_timestamp_seconds{fingerprint_sha256="{fp:old-ca}",serial="64",view="loaded"} 1.8039888e+09
certdrift_ca_certificate_not_after_timestamp_seconds{fingerprint_sha256="{fp:root-ca}",serial="e42",view="desired"} 2.1107088e+09
certdrift_ca_certificate_not_after_timestamp_seconds{fingerprint_sha256="{fp:root-ca}",serial="e42",view="loaded"} 2.1107088e+09
`, root, old)
	compareGolden(t, s, golden, "certdrift_ca_certificate_bundles", "certdrift_ca_certificate_info", "certdrift_ca_certificate_not_after_timestamp_seconds")

	// Sharded, each replica counts its own sources and Envoys; the counts add up to the whole.
	total := map[string]float64{}
	for i := range 3 {
		sh := NewStore(Options{Now: clock(t0), Shard: Shard{Index: i, Total: 3}})
		sh.Record(caRound(root, old))
		for _, m := range family(gatherStore(t, sh), "certdrift_ca_certificate_bundles") {
			l := labelMap(m)
			total[l["view"]+"|"+l["serial"]] += m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"loaded|99": 2, "desired|64": 1, "loaded|64": 1, "desired|e42": 4, "loaded|e42": 1}
	for k, v := range want {
		if total[k] != v {
			t.Errorf("bundles of %s summed over 3 shards = %v, want %v (all: %v)", k, total[k], v, total)
		}
	}
}

// TestSharedCAAddsOneSeries: 10,000 Secrets whose ca.crt holds the same CA (each parsed on its
// own) add exactly one series to each CA family, and nothing else to the exposition.
func TestSharedCAAddsOneSeries(t *testing.T) {
	ca := cert("cluster-ca", 1825)
	count := func(withCA bool) (map[string]int, *Store) {
		r := fleet(10000, 500)
		if withCA {
			for i := range r.Inputs.Desired {
				for j := range r.Inputs.Desired[i].Items {
					r.Inputs.Desired[i].Items[j].CA = []*x509.Certificate{copyOf(ca)}
				}
			}
		}
		s := NewStore(Options{Now: clock(t0)})
		s.Record(r)
		n := map[string]int{}
		for _, mf := range gatherStore(t, s) {
			n[mf.GetName()] = len(mf.GetMetric())
		}
		return n, s
	}
	without, _ := count(false)
	with, s := count(true)
	for name, n := range with {
		want := without[name]
		if strings.HasPrefix(name, "certdrift_ca_certificate_") {
			want = 1
		}
		if n != want {
			t.Errorf("%s: %d series with 10,000 Secrets sharing a CA, want %d", name, n, want)
		}
	}
	if got := family(gatherStore(t, s), "certdrift_ca_certificate_bundles"); len(got) != 1 || got[0].GetGauge().GetValue() != 10000 {
		t.Errorf("bundles of the shared CA: %v, want one series of 10000", got)
	}
}

// BenchmarkRecordSharedCA is BenchmarkRecord with every Secret's ca.crt holding the one cluster
// CA: the cost of deduplicating 10,000 bundles into one series.
func BenchmarkRecordSharedCA(b *testing.B) {
	r := fleet(10000, 500)
	ca := cert("cluster-ca", 1825)
	for i := range r.Inputs.Desired {
		r.Inputs.Desired[i].Items[0].CA = []*x509.Certificate{copyOf(ca)}
	}
	s := NewStore(Options{Now: clock(t0)})
	b.ResetTimer()
	for b.Loop() {
		s.Record(r)
	}
}
