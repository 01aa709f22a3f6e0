package audit

import (
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/test/certs"
)

// BenchmarkRun judges a fleet: 200 desired certificates, 20 Envoys each holding and serving all
// of them (4000 bindings, 4000 handshakes), a tenth of them stale.
func BenchmarkRun(b *testing.B) {
	ca := certs.NewCA(b)
	const nCerts, nEnvoys = 200, 20
	var want []desired.Observation
	leaves := make([]*x509.Certificate, nCerts)
	olds := make([]*x509.Certificate, nCerts)
	for i := range nCerts {
		name := fmt.Sprintf("svc-%d.example.com", i)
		cur := ca.Leaf(b, certs.WithDNSNames(name))
		leaves[i] = cur.Cert
		olds[i] = ca.Leaf(b, certs.WithDNSNames(name)).Cert
		o := desiredObs(fmt.Sprintf("s%d", i), cur, now.Add(-time.Hour))
		o.Items[0].CertPath = fmt.Sprintf("/certs/%d/tls.crt", i)
		want = append(want, o)
	}
	var envoys []EnvoyView
	for e := range nEnvoys {
		snap := &envoystate.Snapshot{AdminURL: "http://x"}
		var eps []config.Endpoint
		var res []tlsprobe.Result
		for i := range nCerts {
			c := leaves[i]
			if (i+e)%10 == 0 {
				c = olds[i]
			}
			snap.Contexts = append(snap.Contexts, envoystate.TLSContext{Chain: []envoystate.CertDetail{detail(fmt.Sprintf("/certs/%d/tls.crt", i), c)}})
			addr := fmt.Sprintf("10.0.%d.1:%d", e, 8000+i)
			eps = append(eps, config.Endpoint{Address: addr, SNI: []string{fmt.Sprintf("svc-%d.example.com", i)}, Source: fmt.Sprintf("s%d", i)})
			res = append(res, served(addr, fmt.Sprintf("svc-%d.example.com", i), c))
		}
		envoys = append(envoys, EnvoyView{Config: config.Envoy{Name: fmt.Sprintf("e%d", e), Endpoints: eps}, Admin: snap, Served: res})
	}
	in := Inputs{Desired: want, Envoys: envoys}
	b.ReportAllocs()
	b.ResetTimer()
	var r Report
	for b.Loop() {
		r = Run(in, config.DefaultPolicy, now)
	}
	if r.Summary.Bindings != nCerts*nEnvoys {
		b.Fatalf("%d bindings, want %d", r.Summary.Bindings, nCerts*nEnvoys)
	}
}

// BenchmarkServedChains is the probe side of a fleet: one desired certificate (leaf under an
// intermediate, with its CA bundle) served by 200 Envoy pods at two SNIs each, 400 handshakes
// whose chains are all the same. "once" is a one-shot audit (no Memo), "rounds" a serve round
// after the first (a Memo kept across Runs).
func BenchmarkServedChains(b *testing.B) {
	ca := certs.NewCA(b)
	inter := ca.Intermediate(b)
	leaf := inter.Leaf(b, certs.WithDNSNames("a.fleet.test", "b.fleet.test"))
	o := desiredObs("fleet/tls", leaf, now.Add(-time.Hour), func(it *desired.Item) {
		it.CA, it.CAPath = []*x509.Certificate{ca.Cert}, "fleet/tls/ca.crt"
	})
	var envoys []EnvoyView
	for p := range 200 {
		addr := fmt.Sprintf("10.0.%d.%d:8443", p/250, p%250+1)
		eps := []config.Endpoint{{Address: addr, SNI: []string{"a.fleet.test", "b.fleet.test"}, Source: "fleet/tls"}}
		envoys = append(envoys, EnvoyView{Config: config.Envoy{Name: fmt.Sprintf("fleet/pod-%d", p), Endpoints: eps},
			Served: []tlsprobe.Result{served(addr, "a.fleet.test", leaf.Chain()...), served(addr, "b.fleet.test", leaf.Chain()...)}})
	}
	in := Inputs{Desired: []desired.Observation{o}, Envoys: envoys}
	for _, mode := range []string{"once", "rounds"} {
		b.Run(mode, func(b *testing.B) {
			in := in
			if mode == "rounds" {
				in.Memo = NewMemo()
				Run(in, config.DefaultPolicy, now)
			}
			b.ReportAllocs()
			var r Report
			for b.Loop() {
				r = Run(in, config.DefaultPolicy, now)
			}
			if r.Summary.Handshakes != 400 || r.Summary.Coverage.HandshakesJudged != 400 {
				b.Fatalf("%+v, want 400 handshakes judged", r.Summary)
			}
		})
	}
}
