package collector

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"strings"
	"syscall"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/ref"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// cert is a synthetic certificate: the collectors read only its fields and Raw (for the
// fingerprint), so goldens stay byte-stable without minting keys.
func cert(name string, serial int64) *x509.Certificate {
	return &x509.Certificate{
		Raw:          []byte("cert " + name),
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name},
		Issuer:       pkix.Name{CommonName: "test-ca"},
		NotBefore:    t0.Add(-24 * time.Hour),
		NotAfter:     t0.Add(time.Duration(serial) * 24 * time.Hour),
	}
}

// testCA issued the fixture's leaves (their issuer is CN=test-ca).
var testCA = cert("test-ca", 3650)

// expand replaces {fp:name} with the fingerprint of cert(name, ...) in a golden.
func expand(golden string, cs ...*x509.Certificate) string {
	for _, c := range cs {
		golden = strings.ReplaceAll(golden, "{fp:"+c.Subject.CommonName+"}", pki.Fingerprint(c))
	}
	return golden
}

// world is a local-mode round: source "web" bound to an SDS Envoy and a static Envoy.
type world struct {
	desired             *x509.Certificate
	sdsLoaded, stLoaded *x509.Certificate
	sdsState, stState   string
	changedAt           time.Time
	findings            []audit.Finding
}

func (w world) round(at time.Time) Round {
	sds := audit.EnvoyView{
		Config: config.Envoy{Name: "sds"},
		Admin: &envoystate.Snapshot{AdminURL: "http://127.0.0.1:9901",
			Secrets: []envoystate.Secret{{Name: "web_cert", State: envoystate.SecretActive, HasCertificate: true, Chain: []*x509.Certificate{w.sdsLoaded}}},
			Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{{Path: "<inline>", Serial: w.sdsLoaded.SerialNumber,
				ValidFrom: w.sdsLoaded.NotBefore, Expiration: w.sdsLoaded.NotAfter}}}}},
		Served: []tlsprobe.Result{{Target: tlsprobe.Target{Address: "127.0.0.1:8443", SNI: "www.example.com"},
			Chain: []*x509.Certificate{w.sdsLoaded}, Duration: 20 * time.Millisecond}},
	}
	static := audit.EnvoyView{
		Config: config.Envoy{Name: "static"},
		Admin: &envoystate.Snapshot{AdminURL: "http://127.0.0.1:9902",
			// A static context: /certs names the file, config_dump has no PEM. It validates
			// clients with the Secret's CA, which /certs shows without a fingerprint.
			Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{{Path: "/secret/tls.crt", Serial: w.stLoaded.SerialNumber,
				ValidFrom: w.stLoaded.NotBefore, Expiration: w.stLoaded.NotAfter}},
				CA: []envoystate.CertDetail{{Path: "/secret/ca.crt", Serial: testCA.SerialNumber, ValidFrom: testCA.NotBefore, Expiration: testCA.NotAfter}}}}},
		Served: []tlsprobe.Result{{Target: tlsprobe.Target{Address: "127.0.0.1:9443", SNI: "www.example.com"},
			Chain: []*x509.Certificate{w.stLoaded}, Duration: 300 * time.Millisecond}},
	}
	return Round{
		Started: at.Add(-time.Second), Finished: at, SourcesUp: map[string]bool{"files": true},
		Inputs: audit.Inputs{
			Desired: []desired.Observation{{Ref: ref.Source{Kind: ref.File, Name: "web"}, Dir: "/secret", ChangedAt: w.changedAt,
				Items: []desired.Item{{CertPath: "/secret/tls.crt", Chain: []*x509.Certificate{w.desired}, CAPath: "/secret/ca.crt", CA: []*x509.Certificate{testCA}}}}},
			Envoys: []audit.EnvoyView{sds, static},
		},
		Report: audit.Report{
			Bindings: []audit.Binding{
				{Envoy: "sds", Source: "web", Secret: "web_cert", Endpoint: "127.0.0.1:8443", SNIs: []string{"www.example.com"}, Origin: "path", State: w.sdsState},
				{Envoy: "static", Source: "web", File: "/secret/tls.crt", Endpoint: "127.0.0.1:9443", SNIs: []string{"www.example.com"}, Origin: "path", State: w.stState},
			},
			Findings: w.findings,
		},
	}
}

func staleFindings() []audit.Finding {
	return []audit.Finding{
		{Code: audit.StaleLoaded, Severity: audit.Critical, Subject: audit.Subject{Envoy: "static", Source: "web", File: "/secret/tls.crt"}},
		{Code: audit.StaleServed, Severity: audit.Critical, Subject: audit.Subject{Envoy: "static", Source: "web", Endpoint: "127.0.0.1:9443", SNI: "www.example.com"}},
		// The same code on another endpoint collapses into one series: labels stay bounded.
		{Code: audit.StaleServed, Severity: audit.Critical, Subject: audit.Subject{Envoy: "static", Source: "web", Endpoint: "127.0.0.2:9443", SNI: "www.example.com"}},
	}
}

// kubeRound is a Kubernetes-mode round: two namespaces, one pod each.
func kubeRound(at time.Time, withSecretB bool) Round {
	a, b := cert("a", 30), cert("b", 40)
	r := Round{Kubernetes: true, Started: at.Add(-time.Second), Finished: at, SourcesUp: map[string]bool{"kubernetes": true}}
	r.Inputs.Desired = []desired.Observation{{Ref: ref.Source{Kind: ref.Secret, Namespace: "ns-a", Name: "tls-a"}, Items: []desired.Item{{Chain: []*x509.Certificate{a}, CA: []*x509.Certificate{testCA}}}}}
	r.Inputs.Envoys = []audit.EnvoyView{{Config: config.Envoy{Name: "ns-a/gw-0"},
		Pod:    &audit.PodContext{Namespace: "ns-a", Pod: "gw-0", Workload: "Deployment/gw"},
		Admin:  &envoystate.Snapshot{CertsErr: &netErr{}},
		Served: []tlsprobe.Result{{Target: tlsprobe.Target{Address: "10.0.0.1:443"}, Err: errors.New("refused"), Reason: tlsprobe.ReasonRefused}}}}
	r.Report.Findings = []audit.Finding{{Code: audit.Unreachable, Severity: audit.Warning, Subject: audit.Subject{Envoy: "ns-a/gw-0", Workload: "Deployment/gw"}}}
	if withSecretB {
		r.Inputs.Desired = append(r.Inputs.Desired, desired.Observation{Ref: ref.Source{Kind: ref.Secret, Namespace: "ns-b", Name: "tls-b"}, Items: []desired.Item{{Chain: []*x509.Certificate{b}}}},
			desired.Observation{Ref: ref.Source{Kind: ref.Secret, Namespace: "ns-b", Name: "broken"}, Err: errors.New("no tls.crt")})
		r.Report.Findings = append(r.Report.Findings, audit.Finding{Code: audit.Expiring, Severity: audit.Warning, Subject: audit.Subject{Source: "ns-b/tls-b"}})
	}
	return r
}

// netErr is a refused connection as net/http reports it.
type netErr struct{}

func (*netErr) Error() string { return "dial tcp 10.0.0.1:15000: connect: connection refused" }
func (*netErr) Unwrap() error { return syscall.ECONNREFUSED }
