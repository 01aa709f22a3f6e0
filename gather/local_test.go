package gather

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/files"
	"github.com/certdrift/certdrift/test/certs"
)

// tlsServer serves leaf to every handshake until the test ends, recording the SNIs asked for.
func tlsServer(t *testing.T, leaf tls.Certificate) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	return l.Addr().String()
}

func TestGather(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t)
	leaf := ca.Leaf(t, certs.WithDNSNames("a.example.com", "b.example.com"))
	certs.WriteFiles(t, dir, map[string][]byte{
		"front/tls.crt":  leaf.ChainPEM(),
		"front/tls.key":  leaf.KeyPEM,
		"merged/x.crt":   leaf.ChainPEM(),
		"merged/x.key":   leaf.KeyPEM,
		"explicit.crt":   leaf.ChainPEM(),
		"not-a-cert.crt": []byte("hello"),
	})
	addr := tlsServer(t, leaf.TLSCertificate())
	closed := closedPort(t)

	cfg := &config.Config{
		Desired: []config.Desired{
			{Name: "front", Dir: filepath.Join(dir, "front")},
			{Name: "merged", Dir: filepath.Join(dir, "merged"), Merged: &config.Merged{CertSuffix: ".crt", KeySuffix: ".key"}},
			{Name: "explicit", CertFile: filepath.Join(dir, "explicit.crt")},
			{Name: "missing", Dir: filepath.Join(dir, "does-not-exist")},
		},
		Envoys: []config.Envoy{
			{Name: "served-only", Endpoints: []config.Endpoint{
				{Address: addr, SNI: []string{"a.example.com", "b.example.com"}},
				{Address: addr}, // no SNI: one handshake without one
			}},
			{Name: "down", Admin: "http://" + closed, Endpoints: []config.Endpoint{{Address: closed}}},
			{Name: "bad-client-cert", Endpoints: []config.Endpoint{{
				Address: addr, SNI: []string{"a.example.com"},
				ClientCert: &config.ClientCert{CertFile: filepath.Join(dir, "not-a-cert.crt"), KeyFile: filepath.Join(dir, "nope.key")},
			}}},
		},
	}
	in := Local(context.Background(), cfg, Fleet, Options{Timeout: 3 * time.Second, Concurrency: 2})

	if in.Config != cfg {
		t.Errorf("Inputs.Config is not the config gathered from")
	}
	// Desired: one observation per source, in config order, named after it.
	var names []string
	for _, o := range in.Desired {
		names = append(names, o.Ref.String())
	}
	if diff := cmp.Diff([]string{"front", "merged", "explicit", "missing"}, names); diff != "" {
		t.Errorf("desired observations: -want +got:\n%s", diff)
	}
	if len(in.Desired) == 4 {
		if o := in.Desired[0]; o.Err != nil || len(o.Items) != 1 || len(o.Items[0].Chain) == 0 || pki.Fingerprint(o.Items[0].Chain[0]) != pki.Fingerprint(leaf.Cert) {
			t.Errorf("front: want the minted leaf, got err=%v items=%d", o.Err, len(o.Items))
		}
		if o := in.Desired[1]; o.Err != nil || len(o.Items) != 1 || o.Items[0].Name != "x" {
			t.Errorf("merged: want one item named x, got err=%v items=%+v", o.Err, len(o.Items))
		}
		if o := in.Desired[3]; o.Err == nil {
			t.Errorf("missing: want Observation.Err for a directory that does not exist")
		}
	}

	if len(in.Envoys) != 3 {
		t.Fatalf("want one EnvoyView per configured Envoy, got %d", len(in.Envoys))
	}
	type shake struct {
		SNI   string
		OK    bool
		Match bool
	}
	summarize := func(i int) []shake {
		var out []shake
		for _, r := range in.Envoys[i].Served {
			s := shake{SNI: r.Target.SNI, OK: r.Err == nil}
			s.Match = len(r.Chain) > 0 && pki.Fingerprint(r.Chain[0]) == pki.Fingerprint(leaf.Cert)
			out = append(out, s)
		}
		sort.Slice(out, func(a, b int) bool { return out[a].SNI < out[b].SNI })
		return out
	}

	served := in.Envoys[0]
	if served.Admin != nil {
		t.Errorf("served-only has no admin URL; want Admin nil, got %+v", served.Admin)
	}
	if diff := cmp.Diff([]shake{{"", true, true}, {"a.example.com", true, true}, {"b.example.com", true, true}}, summarize(0)); diff != "" {
		t.Errorf("served-only handshakes (endpoint × SNI, no SNI → one): -want +got:\n%s", diff)
	}

	down := in.Envoys[1]
	if down.Admin == nil {
		t.Fatalf("down has an admin URL; want a Snapshot carrying the errors")
	}
	if down.Admin.CertsErr == nil {
		t.Errorf("down: admin on a closed port, want CertsErr")
	}
	if diff := cmp.Diff([]shake{{"", false, false}}, summarize(1)); diff != "" {
		t.Errorf("down handshakes: -want +got:\n%s", diff)
	}

	bad := in.Envoys[2]
	if len(bad.Served) != 1 || bad.Served[0].Err == nil || bad.Served[0].Reason != "client_cert" {
		t.Errorf("a client certificate that does not load must become a failed handshake with reason client_cert, got %+v", bad.Served)
	}
}

func TestSourceOf(t *testing.T) {
	got := SourceOf(config.Desired{Name: "n", Dir: "/d", Cert: "c", Key: "k", CA: "a", Merged: &config.Merged{CertSuffix: ".pem", KeySuffix: "-key.pem"}})
	want := files.Source{Name: "n", Dir: "/d", CertKey: "c", KeyKey: "k", CAKey: "a", Merged: &files.MergedPattern{CertSuffix: ".pem", KeySuffix: "-key.pem"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-want +got:\n%s", diff)
	}
}

func TestForEachBounded(t *testing.T) {
	const n, limit = 50, 3
	var inFlight, peak int
	mu := make(chan struct{}, 1)
	done := make([]bool, n)
	forEach(n, limit, func(i int) {
		mu <- struct{}{}
		inFlight++
		peak = max(peak, inFlight)
		<-mu
		time.Sleep(time.Millisecond)
		mu <- struct{}{}
		inFlight--
		done[i] = true
		<-mu
	})
	if peak > limit {
		t.Errorf("peak concurrency %d > limit %d", peak, limit)
	}
	for i, d := range done {
		if !d {
			t.Fatalf("item %d never ran", i)
		}
	}
}

// closedPort returns a loopback address nothing listens on: bound, then released.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
