package audit

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoyadmin"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/certs"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// pki minted once for all cases; validity is relative to now.
type fixture struct {
	ca, ca2, inter *certs.Authority
	old, cur       *certs.Leaf // the rotation: old → cur, same names
	other          *certs.Leaf // different key
	viaInter       *certs.Leaf // signed by the intermediate
	expired, soon  *certs.Leaf
	future, weak   *certs.Leaf
	fromCA2        *certs.Leaf
	sibling        *certs.Leaf // another current leaf for cur's names (a second Certificate)
	otherOld       *certs.Leaf // an older leaf for other's names
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	valid := certs.WithValidity(now.Add(-24*time.Hour), now.Add(90*24*time.Hour))
	ca := certs.NewCA(t, certs.WithCommonName("ca-1"), certs.WithValidity(now.Add(-48*time.Hour), now.Add(3650*24*time.Hour)))
	ca2 := certs.NewCA(t, certs.WithCommonName("ca-2"), certs.WithValidity(now.Add(-48*time.Hour), now.Add(3650*24*time.Hour)))
	inter := ca.Intermediate(t, certs.WithCommonName("inter-1"), certs.WithValidity(now.Add(-48*time.Hour), now.Add(365*24*time.Hour)))
	names := certs.WithDNSNames("www.example.com")
	return &fixture{
		ca: ca, ca2: ca2, inter: inter,
		old:      ca.Leaf(t, certs.WithCommonName("www old"), names, certs.WithFreshKey(), certs.WithValidity(now.Add(-60*24*time.Hour), now.Add(30*24*time.Hour+time.Hour))),
		cur:      ca.Leaf(t, certs.WithCommonName("www"), names, certs.WithFreshKey(), valid),
		other:    ca.Leaf(t, certs.WithCommonName("other"), certs.WithDNSNames("other.example.com"), certs.WithFreshKey(), valid),
		viaInter: inter.Leaf(t, certs.WithCommonName("api"), certs.WithDNSNames("api.example.com"), valid),
		expired:  ca.Leaf(t, certs.WithCommonName("expired"), names, certs.WithValidity(now.Add(-10*24*time.Hour), now.Add(-time.Hour))),
		soon:     ca.Leaf(t, certs.WithCommonName("soon"), names, certs.WithValidity(now.Add(-10*24*time.Hour), now.Add(12*time.Hour))), // 5% of its lifetime left: critical under the default policy
		future:   ca.Leaf(t, certs.WithCommonName("future"), names, certs.WithValidity(now.Add(24*time.Hour), now.Add(90*24*time.Hour))),
		weak:     ca.Leaf(t, certs.WithCommonName("weak"), names, certs.WithKeyType(certs.RSA1024), valid),
		fromCA2:  ca2.Leaf(t, certs.WithCommonName("client"), certs.WithDNSNames("client.example.com"), certs.WithClientAuth(), valid),
		sibling:  ca.Leaf(t, certs.WithCommonName("www sibling"), names, certs.WithFreshKey(), valid),
		otherOld: ca.Leaf(t, certs.WithCommonName("other old"), certs.WithDNSNames("other.example.com"), certs.WithFreshKey(), certs.WithValidity(now.Add(-60*24*time.Hour), now.Add(30*24*time.Hour))),
	}
}

const certPath = "/etc/envoy/tls/tls.crt"

// desiredObs builds a one-item observation as probe/files would report it.
func desiredObs(name string, leaf *certs.Leaf, changedAt time.Time, mod ...func(*desired.Item)) desired.Observation {
	it := desired.Item{CertPath: certPath, KeyPath: "/etc/envoy/tls/tls.key", Chain: leaf.Chain()}
	if name != "web" {
		it.CertPath = "/etc/" + name + "/tls.crt"
	}
	pub := leaf.Cert.PublicKey
	it.Key = &pki.KeyInfo{Public: pub, Algorithm: "test"}
	for _, m := range mod {
		m(&it)
	}
	return desired.Observation{Ref: ref.Source{Kind: ref.File, Name: name}, ChangedAt: changedAt, Items: []desired.Item{it}}
}

func detail(path string, c *x509.Certificate) envoystate.CertDetail {
	return envoystate.CertDetail{Path: path, Serial: c.SerialNumber, SerialText: fmt.Sprintf("%X", c.SerialNumber),
		DNSNames: c.DNSNames, ValidFrom: c.NotBefore, Expiration: c.NotAfter}
}

func loadedFile(path string, cs ...*x509.Certificate) *envoystate.Snapshot {
	s := &envoystate.Snapshot{AdminURL: "http://127.0.0.1:9901"}
	for _, c := range cs {
		s.Contexts = append(s.Contexts, envoystate.TLSContext{Chain: []envoystate.CertDetail{detail(path, c)}})
	}
	return s
}

// withBindings gives an Envoy bindings as Kubernetes mode derives them from the pod's mounts.
func withBindings(ev EnvoyView, bs ...config.Binding) EnvoyView {
	ev.Config.Bindings = append(ev.Config.Bindings, bs...)
	return ev
}

// withContext adds one /certs context per certificate, read from path.
func withContext(s *envoystate.Snapshot, path string, cs ...*x509.Certificate) *envoystate.Snapshot {
	for _, c := range cs {
		s.Contexts = append(s.Contexts, envoystate.TLSContext{Chain: []envoystate.CertDetail{detail(path, c)}})
	}
	return s
}

func served(addr, sni string, chain ...*x509.Certificate) tlsprobe.Result {
	return tlsprobe.Result{Target: tlsprobe.Target{Address: addr, SNI: sni}, Chain: chain}
}

func envoy(name string, admin *envoystate.Snapshot, eps []config.Endpoint, r ...tlsprobe.Result) EnvoyView {
	return EnvoyView{Config: config.Envoy{Name: name, Admin: "http://127.0.0.1:9901", Endpoints: eps}, Admin: admin, Served: r}
}

var ep = []config.Endpoint{{Address: "127.0.0.1:10000", SNI: []string{"www.example.com"}}}

type got struct {
	Codes  []string // "CODE severity", sorted
	States []string // binding "source=state", sorted
}

func summarize(r Report) got {
	var g got
	for _, f := range r.Findings {
		g.Codes = append(g.Codes, string(f.Code)+" "+f.Severity.String())
	}
	for _, b := range r.Bindings {
		g.States = append(g.States, b.Source+"="+b.State)
	}
	sort.Strings(g.Codes)
	sort.Strings(g.States)
	return g
}

func TestRun(t *testing.T) {
	f := newFixture(t)
	rotated := now.Add(-10 * time.Minute) // beyond the 2m default grace
	justNow := now.Add(-20 * time.Second) // inside it
	policy := config.DefaultPolicy

	cases := map[string]struct {
		reason string
		in     Inputs
		want   got
	}{
		"Converged": {
			reason: "desired, loaded and served agree: nothing to report",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile(certPath, f.cur.Cert), ep, served("127.0.0.1:10000", "www.example.com", f.cur.Cert))}},
			want: got{States: []string{"web=converged"}},
		},
		"StaticContextNeverReloaded": {
			reason: "the file rotated 10m ago; Envoy still holds and serves the old leaf",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile(certPath, f.old.Cert), ep, served("127.0.0.1:10000", "www.example.com", f.old.Cert))}},
			want: got{Codes: []string{"STALE_LOADED warning", "STALE_SERVED warning"}, States: []string{"web=stale"}},
		},
		"InsideGracePeriod": {
			reason: "a rotation 20s old is still converging, not drift",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, justNow)},
				Envoys: []EnvoyView{envoy("edge", loadedFile(certPath, f.old.Cert), ep, served("127.0.0.1:10000", "www.example.com", f.old.Cert))}},
			want: got{States: []string{"web=converging"}},
		},
		"DuplicateContextsOneCurrent": {
			reason: "/certs lists a stale context next to the current one: converged, the old one lingering (info), never stale",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile(certPath, f.old.Cert, f.cur.Cert, f.cur.Cert), ep, served("127.0.0.1:10000", "www.example.com", f.cur.Cert))}},
			want: got{Codes: []string{"LINGERING_CONTEXT info"}, States: []string{"web=converged"}},
		},
		"LoadedButNotServed": {
			reason: "admin says current, the wire shows the old leaf",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile(certPath, f.cur.Cert), ep, served("127.0.0.1:10000", "www.example.com", f.old.Cert))}},
			want: got{Codes: []string{"LOADED_SERVED_MISMATCH warning", "STALE_SERVED warning"}, States: []string{"web=stale"}},
		},
		"KeyMismatch": {
			reason: "tls.key belongs to another certificate",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated, func(it *desired.Item) {
				it.Key = &pki.KeyInfo{Public: f.other.Cert.PublicKey, Algorithm: "ECDSA"}
			})}},
			want: got{Codes: []string{"KEY_MISMATCH critical"}},
		},
		"SecretCADoesNotVerifyItsCert": {
			reason: "ca.crt holds ca-2 but tls.crt was issued by ca-1",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated, func(it *desired.Item) {
				it.CA, it.CAPath = []*x509.Certificate{f.ca2.Cert}, "/etc/envoy/tls/ca.crt"
			})}},
			want: got{Codes: []string{"CA_BUNDLE_GAP critical"}},
		},
		"ExpiredExpiringNotYetValid": {
			reason: "each validity problem once, in the view where it was seen",
			in: Inputs{Desired: []desired.Observation{
				desiredObs("a", f.expired, rotated), desiredObs("b", f.soon, rotated), desiredObs("c", f.future, rotated)}},
			want: got{Codes: []string{"EXPIRED critical", "EXPIRING critical", "NOT_YET_VALID warning"}},
		},
		"ExpiringSeenInTwoViewsOnce": {
			reason: "the same soon-expiring leaf in desired, loaded and served is one finding",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.soon, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile(certPath, f.soon.Cert), ep, served("127.0.0.1:10000", "www.example.com", f.soon.Cert))}},
			want: got{Codes: []string{"EXPIRING critical"}, States: []string{"web=converged"}},
		},
		"HostnameMismatch": {
			reason: "the listener answers SNI www with the other certificate",
			in: Inputs{Desired: []desired.Observation{desiredObs("other", f.other, rotated)},
				Envoys: []EnvoyView{envoy("edge", nil, []config.Endpoint{{Address: "127.0.0.1:10000", SNI: []string{"www.example.com"}, Source: "other"}},
					served("127.0.0.1:10000", "www.example.com", f.other.Cert))}},
			want: got{Codes: []string{"HOSTNAME_MISMATCH critical"}, States: []string{"other=converged"}},
		},
		"UnreachableAdminAndEndpoint": {
			reason: "nothing answered: two gaps in coverage, the rest of the audit still runs",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", &envoystate.Snapshot{AdminURL: "http://127.0.0.1:1",
					CertsErr: refused(), ConfigErr: refused(), StatsErr: refused()}, ep,
					tlsprobe.Result{Target: tlsprobe.Target{Address: "127.0.0.1:10000", SNI: "www.example.com"}, Err: errors.New("i/o timeout"), Reason: "timeout"})}},
			want: got{Codes: []string{"UNREACHABLE warning", "UNREACHABLE warning"}, States: []string{"web=unknown"}},
		},
		"AdminAnswersGarbage": {
			reason: "an admin port that answers with HTML is a parse error, not unreachable",
			in: Inputs{Envoys: []EnvoyView{envoy("edge", &envoystate.Snapshot{AdminURL: "http://127.0.0.1:9901",
				CertsErr: errors.New("response is HTML, not JSON")}, nil)}},
			want: got{Codes: []string{"PARSE_ERROR warning"}},
		},
		"AdminAnswers503": {
			reason: "a 5xx from the admin port (or a proxy before it) is a gap in coverage, not a parse error",
			in: Inputs{Envoys: []EnvoyView{envoy("edge", &envoystate.Snapshot{AdminURL: "http://127.0.0.1:9901",
				CertsErr: &envoyadmin.StatusError{URL: "http://127.0.0.1:9901/certs", Code: 503}}, nil)}},
			want: got{Codes: []string{"UNREACHABLE warning"}},
		},
		"RotationRejected": {
			reason: "Envoy rejected the new pair and keeps the old certificate",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", withSecret(loadedFile(certPath, f.old.Cert), "web_cert", certPath,
					map[string]uint64{"sds.web_cert.key_rotation_failed": 2}), nil)}},
			want: got{Codes: []string{"ROTATION_FAILED critical", "STALE_LOADED warning"}, States: []string{"web=stale"}},
		},
		"AcceptedButNotInUse": {
			reason: "config_dump holds the new secret but /certs shows every context kept the old leaf (a rejected key pair)",
			in: Inputs{Desired: []desired.Observation{desiredDir("web", "/etc/envoy/tls", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", inlineSecret(loadedFile("<inline>", f.old.Cert), "web_cert", "/etc/envoy/tls", f.cur.Cert,
					map[string]uint64{"sds.web_cert.key_rotation_failed": 1}), ep, served("127.0.0.1:10000", "www.example.com", f.old.Cert))}},
			want: got{Codes: []string{"ROTATION_FAILED critical", "STALE_LOADED warning", "STALE_SERVED warning"}, States: []string{"web=stale"}},
		},
		"ConfigBindingCompletedFromCerts": {
			reason: "an endpoint names its source; /certs shows the old leaf at that source's file",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile(certPath, f.old.Cert), []config.Endpoint{{Address: "127.0.0.1:10000", SNI: []string{"www.example.com"}, Source: "web"}},
					served("127.0.0.1:10000", "www.example.com", f.old.Cert))}},
			want: got{Codes: []string{"STALE_LOADED warning", "STALE_SERVED warning"}, States: []string{"web=stale"}},
		},
		"WarmingSecret": {
			reason: "a secret that never became active",
			in: Inputs{Envoys: []EnvoyView{envoy("edge", &envoystate.Snapshot{AdminURL: "http://x",
				Secrets: []envoystate.Secret{{Name: "spiffe://a/b", State: envoystate.SecretWarming}}}, nil)}},
			want: got{Codes: []string{"ROTATION_FAILED warning"}},
		},
		"PairingGap": {
			reason: "the proxy's bundle still holds only ca-1 while the client leaf moved to ca-2",
			in: Inputs{
				Config: &config.Config{Pairings: []config.Pairing{{Name: "proxy-trusts-client", Bundle: config.Ref{Source: "proxy-ca"}, Leaf: config.Ref{Source: "client"}}}},
				Desired: []desired.Observation{
					{Ref: ref.Source{Kind: ref.File, Name: "proxy-ca"}, Items: []desired.Item{{CAPath: "/etc/proxy/ca.crt", CA: []*x509.Certificate{f.ca.Cert}}}},
					desiredObs("client", f.fromCA2, rotated)}},
			want: got{Codes: []string{"CA_BUNDLE_GAP critical"}},
		},
		"PairingCovered": {
			reason: "a [newCA, oldCA] bundle accepts both generations",
			in: Inputs{
				Config: &config.Config{Pairings: []config.Pairing{{Bundle: config.Ref{Source: "proxy-ca"}, Leaf: config.Ref{Source: "client"}}}},
				Desired: []desired.Observation{
					{Ref: ref.Source{Kind: ref.File, Name: "proxy-ca"}, Items: []desired.Item{{CAPath: "/etc/proxy/ca.crt", CA: []*x509.Certificate{f.ca2.Cert, f.ca.Cert}}}},
					desiredObs("client", f.fromCA2, rotated)}},
		},
		"WeakCrypto": {
			reason: "RSA 1024 in the desired certificate",
			in:     Inputs{Desired: []desired.Observation{desiredObs("web", f.weak, rotated)}},
			want:   got{Codes: []string{"WEAK_CRYPTO warning"}},
		},
		"MissingIntermediate": {
			reason: "the file holds leaf+intermediate, the listener serves the leaf alone",
			in: Inputs{Desired: []desired.Observation{desiredObs("api", f.viaInter, rotated, func(it *desired.Item) {
				it.CA, it.CAPath = []*x509.Certificate{f.ca.Cert}, "/etc/api/ca.crt"
			})}, Envoys: []EnvoyView{envoy("edge", nil, []config.Endpoint{{Address: "127.0.0.1:10001", SNI: []string{"api.example.com"}, Source: "api"}},
				served("127.0.0.1:10001", "api.example.com", f.viaInter.Cert))}},
			want: got{Codes: []string{"CHAIN_INCOMPLETE warning"}, States: []string{"api=converged"}},
		},
		"BundleHygiene": {
			reason: "three distinct CAs and a duplicate, against a policy of two",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated, func(it *desired.Item) {
				it.CA, it.CAPath = []*x509.Certificate{f.ca.Cert, f.ca2.Cert, f.inter.Cert, f.ca.Cert}, "/etc/envoy/tls/ca.crt"
			})}},
			want: got{Codes: []string{"CA_BUNDLE_HYGIENE info", "CA_BUNDLE_HYGIENE warning"}},
		},
		"UnreadableSource": {
			reason: "a dangling ..data and a broken certificate file",
			in: Inputs{Desired: []desired.Observation{
				{Ref: ref.Source{Kind: ref.File, Name: "gone"}, Dir: "/etc/gone", Err: errors.New("..data is a dangling symlink")},
				{Ref: ref.Source{Kind: ref.File, Name: "bad"}, Items: []desired.Item{{CertPath: "/etc/bad/tls.crt", ChainErr: errors.New("PEM block 1: malformed")}}}}},
			want: got{Codes: []string{"PARSE_ERROR warning", "PARSE_ERROR warning"}},
		},
		"InferredBinding": {
			reason: "no config and a path certdrift does not know: bound by equal DNS names, marked inferred",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile("/somewhere/else.pem", f.old.Cert), nil)}},
			want: got{Codes: []string{"STALE_LOADED warning"}, States: []string{"web=stale"}},
		},
		"NotInferredWhenBound": {
			reason: "two Secrets for the same names (two cert-manager Certificates for one host); the Envoy reads the first from its mounted file and holds an old copy of it: stale for that one, not for the sibling it never mounted",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated), desiredObs("sibling", f.sibling, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile(certPath, f.old.Cert), nil)}},
			want: got{Codes: []string{"STALE_LOADED warning"}, States: []string{"web=stale"}},
		},
		"NotLoadedByNamesWhenLocated": {
			reason: "the pod mounts two Secrets for one host and Envoy reads only the first: the second is not judged against the first's leaf (same names), it is simply not loaded",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated), desiredObs("sibling", f.sibling, rotated)},
				Envoys: []EnvoyView{withBindings(envoy("edge", loadedFile(certPath, f.cur.Cert), nil),
					config.Binding{Source: "web", File: certPath, Origin: OriginPath}, config.Binding{Source: "sibling", File: "/etc/sibling/tls.crt", Origin: OriginPath})}},
			want: got{States: []string{"sibling=unknown", "web=converged"}},
		},
		"InferredBesideABinding": {
			reason: "control: a second loaded leaf that no binding accounts for is still inferred to the Secret with its names",
			in: Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, rotated), desiredObs("other", f.other, rotated)},
				Envoys: []EnvoyView{envoy("edge", withContext(loadedFile(certPath, f.cur.Cert), "/somewhere/else.pem", f.otherOld.Cert), nil)}},
			want: got{Codes: []string{"STALE_LOADED warning"}, States: []string{"other=stale", "web=converged"}},
		},
		"NotInferredFromASibling": {
			reason: "two Secrets issued for the same names (Envoy Gateway's certgen: envoy and envoy-rate-limit); the Envoy holds the first one's current leaf, which is no old copy of the second",
			in: Inputs{Desired: []desired.Observation{desiredObs("envoy", f.cur, rotated), desiredObs("envoy-rate-limit", f.old, rotated)},
				Envoys: []EnvoyView{envoy("edge", loadedFile("/somewhere/else.pem", f.cur.Cert), nil)}},
			want: got{States: []string{"envoy=converged"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := Run(tc.in, policy, now)
			checkLazyAlike(t, tc.in, policy, now, r)
			if diff := cmp.Diff(tc.want, summarize(r), cmp.Transformer("nil", func(s []string) []string {
				if len(s) == 0 {
					return nil
				}
				return s
			})); diff != "" {
				for _, f := range r.Findings {
					t.Logf("%s %s: %s", f.Code, f.Severity, f.Message)
				}
				t.Errorf("%s\nRun() mismatch (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func refused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
}

// inlineSecret adds a file-based SDS secret as Envoy 1.36/1.40 dump it: the certificate inlined,
// the watched directory kept, no filename.
func inlineSecret(s *envoystate.Snapshot, name, watched string, leaf *x509.Certificate, counters map[string]uint64) *envoystate.Snapshot {
	s.Secrets = append(s.Secrets, envoystate.Secret{Name: name, State: envoystate.SecretActive, HasCertificate: true, WatchedDir: watched, Chain: []*x509.Certificate{leaf}})
	s.Stats = envoystate.Stats{Counters: counters}
	return s
}

func withSecret(s *envoystate.Snapshot, name, file string, counters map[string]uint64) *envoystate.Snapshot {
	s.Secrets = append(s.Secrets, envoystate.Secret{Name: name, State: envoystate.SecretActive, HasCertificate: true, CertFile: file})
	s.Stats = envoystate.Stats{Counters: counters}
	return s
}

func TestStaleFindingEvidence(t *testing.T) {
	f := newFixture(t)
	in := Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, now.Add(-time.Hour))},
		Envoys: []EnvoyView{envoy("edge", loadedFile(certPath, f.old.Cert), ep, served("127.0.0.1:10000", "www.example.com", f.old.Cert))}}
	r := Run(in, config.DefaultPolicy, now)
	i := slices.IndexFunc(r.Findings, func(f Finding) bool { return f.Code == StaleServed })
	if i < 0 {
		t.Fatalf("no STALE_SERVED in %+v", r.Findings)
	}
	ev := r.Findings[i].Evidence
	if ev["served_fingerprint_sha256"] != pki.Fingerprint(f.old.Cert) || ev["desired_fingerprint_sha256"] != pki.Fingerprint(f.cur.Cert) {
		t.Errorf("evidence lacks both fingerprints: %v", ev)
	}
	if r.Findings[i].Since == nil || !r.Findings[i].Since.Equal(now.Add(-time.Hour)) {
		t.Errorf("Since = %v, want the desired change time", r.Findings[i].Since)
	}
	if r.MaxSeverity() != Warning {
		t.Errorf("MaxSeverity = %v, want warning", r.MaxSeverity())
	}
}

// desiredDir is desiredObs() for a directory source (kubelet layout) at dir.
func desiredDir(name, dir string, leaf *certs.Leaf, changedAt time.Time) desired.Observation {
	o := desiredObs(name, leaf, changedAt)
	o.Dir = dir
	return o
}
