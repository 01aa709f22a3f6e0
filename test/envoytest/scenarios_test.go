package envoytest

// These tests pin down the Envoy behaviour certdrift's checks rely on, against the real binary of
// the version under test (CERTDRIFT_ENVOY_VERSION). When an Envoy release changes any of it, a
// test here fails and names the assumption that broke.

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/test/certs"
)

// reloadDeadline bounds how long file-based SDS may take to serve a swapped certificate. Envoy
// reacts to the inotify event in milliseconds; the margin is for a loaded CI machine.
const reloadDeadline = 10 * time.Second

// settle is how long a test waits before concluding that Envoy did NOT react to a swap: far
// above the observed reaction time (under 50ms).
const settle = 2 * time.Second

// watchMode is one way of wiring file-based SDS to a kubelet Secret volume.
type watchMode struct {
	name string
	// sds builds the SDS reference for the listener and the SDS resource file content.
	sds func(t *testing.T, s kubeletSecret) SDSRef
}

var watchModes = []watchMode{
	{
		// The brief's shape: the SDS file lives elsewhere; a move in the volume re-reads it.
		name: "PathConfigSourceWatchedDirectory",
		sds: func(t *testing.T, s kubeletSecret) SDSRef {
			p := writeSDS(t, "server_cert", TLSSecret("server_cert", s.certPath(), s.keyPath(), ""))
			return SDSRef{Name: "server_cert", Path: p, WatchedDir: s.Dir}
		},
	},
	{
		// Envoy's own watch on the files a secret names, told which directory to watch.
		name: "TLSCertificateWatchedDirectory",
		sds: func(t *testing.T, s kubeletSecret) SDSRef {
			p := writeSDS(t, "server_cert", TLSSecret("server_cert", s.certPath(), s.keyPath(), s.Dir))
			return SDSRef{Name: "server_cert", Path: p}
		},
	},
	{
		// No watched_directory anywhere: Envoy watches the parent directory of each file for
		// moves, and the kubelet's "..data" rename is such a move.
		name: "DefaultParentDirectoryWatch",
		sds: func(t *testing.T, s kubeletSecret) SDSRef {
			p := writeSDS(t, "server_cert", TLSSecret("server_cert", s.certPath(), s.keyPath(), ""))
			return SDSRef{Name: "server_cert", Path: p}
		},
	},
}

// Scenario 1: file-based SDS serves a rotated certificate after the kubelet's ..data swap.
func TestFileSDSReloadsAfterDataSwap(t *testing.T) {
	ca := certs.NewCA(t)
	for _, m := range watchModes {
		t.Run(m.name, func(t *testing.T) {
			old, rotated := leafPair(t, ca)
			sec := newKubeletSecret(t, old)
			e := Start(t, Config{Bootstrap: FileSDSBootstrap(m.sds(t, sec))})
			addr := e.ListenerAddr(t, "https")
			assertServed(t, addr, old.Cert, "before the swap")
			updatesBefore := e.Counters(t)[sslContextUpdates]

			sec.write(t, rotated.ChainPEM(), rotated.KeyPEM)
			took := waitServed(t, addr, rotated.Cert, reloadDeadline)
			t.Logf("Envoy %s, %s: rotated leaf served %v after the ..data swap", e.Version(), m.name, took)

			if got, want := certsSerials(t, e), []string{serialHex(rotated)}; !cmp.Equal(hexes(got), want) {
				t.Errorf("/certs leaf serials after rotation: got %v, want %v (one context, the new leaf)", hexes(got), want)
			}
			assertDumpedLeaf(t, e, rotated, "after rotation")
			after := e.Counters(t)
			if got := after[sslContextUpdates]; got != updatesBefore+1 {
				t.Errorf("%s: got %d after one rotation, want %d", sslContextUpdates, got, updatesBefore+1)
			}
			if got, want := after[certExpiration], uint64(rotated.Cert.NotAfter.Unix()); got != want {
				t.Errorf("%s: got %d, want the rotated leaf's NotAfter %d", certExpiration, got, want)
			}
		})
	}
}

// Scenario 2: static tls_certificates are read once; a swap changes nothing Envoy serves or
// reports, which is why certdrift must compare loaded/served with desired for static configs.
func TestStaticTLSKeepsOldCertAfterDataSwap(t *testing.T) {
	ca := certs.NewCA(t)
	old := ca.Leaf(t, certs.WithDNSNames("app.test"))
	rotated := ca.Leaf(t, certs.WithDNSNames("app.test"), certs.WithFreshKey())
	sec := newKubeletSecret(t, old)
	e := Start(t, Config{Bootstrap: StaticTLSBootstrap(sec.certPath(), sec.keyPath())})
	addr := e.ListenerAddr(t, "https")
	assertServed(t, addr, old.Cert, "before the swap")

	sec.write(t, rotated.ChainPEM(), rotated.KeyPEM)
	time.Sleep(settle)
	assertServed(t, addr, old.Cert, "after the swap (static config must not reload)")
	if got, want := hexes(certsSerials(t, e)), []string{serialHex(old)}; !cmp.Equal(got, want) {
		t.Errorf("/certs leaf serials: got %v, want %v (the old leaf)", got, want)
	}
	// /certs names the file it read, which still holds the new certificate on disk: a path
	// match alone does not prove the loaded cert is the desired one.
	if p := certsPaths(t, e); !cmp.Equal(p, []string{sec.certPath()}) {
		t.Errorf("/certs paths: got %v, want [%s]", p, sec.certPath())
	}
	if got := dumpedSecrets(t, e, "dynamic_active_secrets"); len(got) != 0 {
		t.Errorf("config_dump has %d dynamic secrets for a static config, want 0", len(got))
	}
}

// Scenario 3: a swap to a certificate and key that do not match is refused; Envoy keeps serving
// the old certificate. This records how the refusal shows on the admin endpoint.
func TestRejectedKeyPairKeepsOldCert(t *testing.T) {
	ca := certs.NewCA(t)
	for _, m := range watchModes {
		t.Run(m.name, func(t *testing.T) {
			old, rotated := leafPair(t, ca)
			stranger := ca.Leaf(t, certs.WithDNSNames("other.test"), certs.WithFreshKey())
			sec := newKubeletSecret(t, old)
			e := Start(t, Config{Bootstrap: FileSDSBootstrap(m.sds(t, sec))})
			addr := e.ListenerAddr(t, "https")
			assertServed(t, addr, old.Cert, "before the swap")
			before := e.Counters(t)

			sec.write(t, rotated.ChainPEM(), stranger.KeyPEM) // key does not match the cert
			waitCounterAbove(t, e, "sds.server_cert.key_rotation_failed", before, reloadDeadline)
			time.Sleep(settle) // let any late reaction happen before looking
			after := e.Counters(t)
			assertServed(t, addr, old.Cert, "after a swap to a mismatched key pair")

			for _, name := range []string{"sds.server_cert.update_rejected", "sds.server_cert.update_failure", sslContextUpdates} {
				if after[name] != before[name] {
					t.Errorf("%s changed %d -> %d on a rejected key pair, want unchanged", name, before[name], after[name])
				}
			}
			t.Logf("Envoy %s, %s: counters changed by the rejected swap: %s", e.Version(), m.name, counterDiff(before, after))

			// The loaded view: /certs keeps the old leaf (it reads the live TLS context) ...
			if got, want := hexes(certsSerials(t, e)), []string{serialHex(old)}; !cmp.Equal(got, want) {
				t.Errorf("/certs leaf serials: got %v, want %v (the old, still served leaf)", got, want)
			}
			// ... but config_dump shows the rejected certificate: the SDS secret took the new
			// bytes even though no TLS context could use them. certdrift must treat config_dump
			// vs /certs disagreement as a failed rotation, never config_dump as "loaded".
			assertDumpedLeaf(t, e, rotated, "after the rejected swap")
			// ... and so does the per-secret expiry gauge: it follows the secret, not the TLS
			// context actually serving.
			if got, want := after[certExpiration], uint64(rotated.Cert.NotAfter.Unix()); got != want {
				t.Errorf("%s after the rejected swap: got %d, want the rejected leaf's NotAfter %d (old leaf: %d)", certExpiration, got, want, old.Cert.NotAfter.Unix())
			}
			if !strings.Contains(e.Logs(), "Failed to reload certificates") {
				t.Errorf("Envoy log lacks %q after a rejected key pair", "Failed to reload certificates")
			}

			// A good pair afterwards is picked up, and the failure counter keeps its value: it
			// records history, not the current state.
			sec.write(t, rotated.ChainPEM(), rotated.KeyPEM)
			waitServed(t, addr, rotated.Cert, reloadDeadline)
			if got := e.Counters(t)["sds.server_cert.key_rotation_failed"]; got != after["sds.server_cert.key_rotation_failed"] {
				t.Errorf("key_rotation_failed after a good swap: got %d, want unchanged %d", got, after["sds.server_cert.key_rotation_failed"])
			}
			assertDumpedLeaf(t, e, rotated, "after the repairing swap")
		})
	}
}

// Scenario 3b: a swap to a file that is not a certificate at all fails the same way.
func TestUnparsableCertKeepsOldCert(t *testing.T) {
	ca := certs.NewCA(t)
	old := ca.Leaf(t, certs.WithDNSNames("app.test"))
	sec := newKubeletSecret(t, old)
	e := Start(t, Config{Bootstrap: FileSDSBootstrap(watchModes[0].sds(t, sec))})
	addr := e.ListenerAddr(t, "https")
	before := e.Counters(t)

	sec.write(t, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), old.KeyPEM)
	waitCounterAbove(t, e, "sds.server_cert.key_rotation_failed", before, reloadDeadline)
	time.Sleep(settle)
	assertServed(t, addr, old.Cert, "after a swap to an unparsable certificate")
	t.Logf("Envoy %s: counters changed by an unparsable certificate: %s", e.Version(), counterDiff(before, e.Counters(t)))
	if got, want := hexes(certsSerials(t, e)), []string{serialHex(old)}; !cmp.Equal(got, want) {
		t.Errorf("/certs leaf serials: got %v, want %v", got, want)
	}
}

// Scenario 4: an mTLS listener trusting CA1 rejects a client leaf from CA2, and accepts it once
// its (SDS) trust bundle holds both CAs: the CA rotation case of DESIGN.md.
func TestMTLSValidationContext(t *testing.T) {
	ca1 := certs.NewCA(t, certs.WithCommonName("ca1"))
	ca2 := certs.NewCA(t, certs.WithCommonName("ca2"))
	server := ca1.Leaf(t, certs.WithDNSNames("app.test"))
	client1 := ca1.Leaf(t, certs.WithCommonName("client1"), certs.WithClientAuth())
	client2 := ca2.Leaf(t, certs.WithCommonName("client2"), certs.WithClientAuth())

	srvDir := filepath.Join(t.TempDir(), "server")
	certs.WriteFiles(t, srvDir, map[string][]byte{"tls.crt": server.ChainPEM(), "tls.key": server.KeyPEM})
	bundle := filepath.Join(t.TempDir(), "bundle-volume")
	writeBundle(t, bundle, certs.Bundle(ca1))
	caSDS := writeSDS(t, "client_ca", ValidationSecret("client_ca", filepath.Join(bundle, "ca.crt"), ""))

	e := Start(t, Config{Bootstrap: Bootstrap(
		Listener{Name: "static_ca", Address: "127.0.0.2", Chains: []Chain{{
			CertFile: filepath.Join(srvDir, "tls.crt"), KeyFile: filepath.Join(srvDir, "tls.key"),
			ClientCAFile: filepath.Join(bundle, "ca.crt"), RequireClientCert: true,
		}}},
		Listener{Name: "sds_ca", Address: "127.0.0.3", Chains: []Chain{{
			CertFile: filepath.Join(srvDir, "tls.crt"), KeyFile: filepath.Join(srvDir, "tls.key"),
			ClientCASDS: &SDSRef{Name: "client_ca", Path: caSDS}, RequireClientCert: true,
		}}},
	)})
	staticAddr, sdsAddr := e.ListenerAddr(t, "static_ca"), e.ListenerAddr(t, "sds_ca")

	cases := []struct {
		name    string
		addr    string
		client  *certs.Leaf
		wantErr bool
	}{
		{name: "StaticCA1AcceptsCA1Client", addr: staticAddr, client: client1},
		{name: "StaticCA1RejectsCA2Client", addr: staticAddr, client: client2, wantErr: true},
		{name: "StaticCA1RejectsNoClientCert", addr: staticAddr, wantErr: true},
		{name: "SDSCA1AcceptsCA1Client", addr: sdsAddr, client: client1},
		{name: "SDSCA1RejectsCA2Client", addr: sdsAddr, client: client2, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := mtlsGet(tc.addr, tc.client, ca1)
			if (err != nil) != tc.wantErr {
				t.Fatalf("mTLS GET to %s: err = %v, want error: %v", tc.addr, err, tc.wantErr)
			}
		})
	}
	// A certificate from an untrusted CA and a missing certificate count apart.
	got := e.Counters(t)
	for name, want := range map[string]uint64{
		ListenerStatPrefix("127.0.0.2", 0) + ".ssl.fail_verify_error":   1,
		ListenerStatPrefix("127.0.0.2", 0) + ".ssl.fail_verify_no_cert": 1,
		ListenerStatPrefix("127.0.0.3", 0) + ".ssl.fail_verify_error":   1,
	} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d", name, got[name], want)
		}
	}

	// The CA rotation: the bundle becomes [CA1, CA2]. The SDS listener accepts CA2 clients, the
	// static one still does not.
	writeBundle(t, bundle, certs.Bundle(ca1, ca2))
	deadline := time.Now().Add(reloadDeadline)
	for mtlsGet(sdsAddr, client2, ca1) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("SDS validation context did not accept a CA2 client within %v of the bundle swap", reloadDeadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(settle)
	if err := mtlsGet(staticAddr, client2, ca1); err == nil {
		t.Errorf("static validation_context accepted a CA2 client after the bundle swap: it must not reload")
	}
	if err := mtlsGet(sdsAddr, client1, ca1); err != nil {
		t.Errorf("SDS validation context rejects CA1 clients after the bundle became [CA1, CA2]: %v", err)
	}
}

// stat names and small helpers

// leafPair is a leaf and its renewal for the same name, with distinct keys and expiry times so
// that every view can tell them apart.
func leafPair(t *testing.T, ca *certs.Authority) (old, rotated *certs.Leaf) {
	now := time.Now().Truncate(time.Second)
	old = ca.Leaf(t, certs.WithDNSNames("app.test"), certs.WithValidity(now.Add(-time.Hour), now.Add(30*24*time.Hour)))
	rotated = ca.Leaf(t, certs.WithDNSNames("app.test"), certs.WithFreshKey(), certs.WithValidity(now.Add(-time.Minute), now.Add(90*24*time.Hour)))
	return old, rotated
}

// Stats of the single "https" listener of FileSDSBootstrap and StaticTLSBootstrap.
var (
	// sslContextUpdates counts TLS contexts (re)built from SDS: 1 at start, +1 per rotation
	// that produced a usable context.
	sslContextUpdates = ListenerStatPrefix("127.0.0.1", 0) + ".server_ssl_socket_factory.ssl_context_update_by_sds"
	// certExpiration is the per-secret expiry gauge (unix seconds).
	certExpiration = ListenerStatPrefix("127.0.0.1", 0) + ".ssl.certificate.server_cert.expiration_unix_time_seconds"
)

func waitCounterAbove(t *testing.T, e *Envoy, name string, before map[string]uint64, timeout time.Duration) map[string]uint64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		now := e.Counters(t)
		if now[name] > before[name] {
			return now
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed at %d for %v (changed: %s)", name, before[name], timeout, counterDiff(before, now))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
