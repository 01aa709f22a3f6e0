package inventory

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
	"github.com/certdrift/certdrift/test/certs"
)

// offlineInventory is an Inventory without informers, for calling the transforms directly.
func offlineInventory(opts Options) *Inventory {
	opts = opts.withDefaults()
	shared := newInterner(1 << 14)
	return &Inventory{opts: opts, log: opts.Logger, strings: shared, changes: newChangeTracker(shared),
		parser: &parser{limits: opts.Limits, maxItems: opts.MaxItemsPerSecret, bundles: newBundleCache(4096)}}
}

// TestKeySummaryKeepsNoKey: a key that matches its certificate leaves nothing of itself in the
// summary (the audit gets the leaf's public key instead); one that does not keeps a standalone
// public key, never the parsed private key or a pointer into it.
func TestKeySummaryKeepsNoKey(t *testing.T) {
	ca := certs.NewCA(t)
	cases := map[string]struct {
		reason  string
		keyType certs.KeyType
		pubType reflect.Type
	}{
		"ECDSA":   {reason: "P-256, the common case", keyType: certs.ECDSAP256, pubType: reflect.TypeFor[*ecdsa.PublicKey]()},
		"RSA":     {reason: "RSA keeps primes and precomputed values beside the public key", keyType: certs.RSA2048, pubType: reflect.TypeFor[*rsa.PublicKey]()},
		"Ed25519": {reason: "the private key's second half is the public key", keyType: certs.Ed25519, pubType: reflect.TypeFor[ed25519.PublicKey]()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			leaf := ca.Leaf(t, certs.WithKeyType(tc.keyType), certs.WithFreshKey())
			other := ca.Leaf(t, certs.WithKeyType(tc.keyType), certs.WithFreshKey())
			inv := offlineInventory(Options{})
			for _, c := range []struct {
				what  string
				key   []byte
				match bool
			}{{"own key", leaf.KeyPEM, true}, {"another leaf's key", other.KeyPEM, false}} {
				e, err := inv.transformSecret(kubetest.TLSSecret("ns", "s", leaf.CertPEM, c.key, nil))
				if err != nil {
					t.Fatal(err)
				}
				sum := e.(*secretEntry).Summary
				k := sum.Items[0].Key
				if k == nil || k.Matches != c.match {
					t.Fatalf("%s\n%s: key summary %+v, want Matches=%v", tc.reason, c.what, k, c.match)
				}
				switch {
				case c.match && k.Public != nil:
					t.Errorf("%s\n%s: a matching key keeps a %T; want none", tc.reason, c.what, k.Public)
				case !c.match && reflect.TypeOf(k.Public) != tc.pubType:
					t.Errorf("%s\n%s: a mismatched key keeps a %T; want a standalone %v", tc.reason, c.what, k.Public, tc.pubType)
				}
				// The audit's own key check must see the same answer as before.
				snap := kube.Snapshot{Secrets: []*kube.SecretSummary{sum}}
				obs := snap.Observations()
				it := obs[0].Items[0]
				eq, ok := it.Key.Public.(interface{ Equal(crypto.PublicKey) bool })
				if !ok || eq.Equal(leaf.Cert.PublicKey) != c.match {
					t.Errorf("%s\n%s: Observations hand the audit a public key that matches=%v, want %v", tc.reason, c.what, ok && eq.Equal(leaf.Cert.PublicKey), c.match)
				}
			}
		})
	}
}

// syntheticTLSSecrets mints n kubernetes.io/tls Secrets like the issue 4 data set: unique ECDSA
// leaves and keys, one shared ca.crt, the managedFields the API server writes.
func syntheticTLSSecrets(tb testing.TB, n int) []*corev1.Secret {
	ca := certs.NewCA(tb)
	stamp := metav1.NewTime(time.Unix(1_800_000_000, 0))
	out := make([]*corev1.Secret, n)
	for i := range n {
		leaf := ca.Leaf(tb, certs.WithFreshKey(), certs.WithDNSNames(fmt.Sprintf("svc-%d.bench.example", i)))
		s := kubetest.TLSSecret(fmt.Sprintf("bench-%02d", i%100), fmt.Sprintf("tls-%d", i), leaf.CertPEM, leaf.KeyPEM, ca.CertPEM)
		s.UID = typesUID(fmt.Sprintf("5c0f7d7e-0000-4000-8000-%012d", i))
		s.ResourceVersion = fmt.Sprint(100000 + i)
		s.CreationTimestamp = stamp
		s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "v1", Time: &stamp, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:data":{".":{},"f:ca.crt":{},"f:tls.crt":{},"f:tls.key":{}},"f:type":{}}`)}}
		out[i] = s
	}
	return out
}

// summaryHeap summarizes secrets with one offline inventory and returns the heap they keep
// (summaries and change tracking; not the informer's store), per Secret.
func summaryHeap(tb testing.TB, secrets []*corev1.Secret, opts Options) float64 {
	inv := offlineInventory(opts)
	kept := make([]any, len(secrets))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i, s := range secrets {
		e, err := inv.transformSecret(s.DeepCopy())
		if err != nil {
			tb.Fatal(err)
		}
		kept[i] = e
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	runtime.KeepAlive(inv)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(len(secrets))
}

// maxSummaryBytesPerSecret is what a TLS Secret may cost the inventory, summary and change
// tracking together, before the informer's store: ~1,290 bytes measured on these test Secrets
// (of which ~560 are the leaf's DER), with room for allocator and map-growth noise. The same test
// measured 2,650 before the work in docs/benchmarks.md ("inventory heap"): keeping the parsed
// private key again (+330), a parsed pki.Summary (+500) or an x509.Certificate goes over.
const maxSummaryBytesPerSecret = 1500

func TestSummaryHeapPerSecret(t *testing.T) {
	per := summaryHeap(t, syntheticTLSSecrets(t, 1000), Options{})
	t.Logf("%.0f bytes kept per Secret", per)
	if per > maxSummaryBytesPerSecret {
		t.Errorf("the inventory keeps %.0f bytes per TLS Secret, want at most %d: something keeps more than the summary (a parsed key or certificate, the Secret's data?)", per, maxSummaryBytesPerSecret)
	}
}

// BenchmarkSummaryHeap reports the heap kept per TLS Secret by the transform (no API server):
//
//	nice -n 10 go test ./probe/kube/ -run '^$' -bench SummaryHeap -benchtime 3x
func BenchmarkSummaryHeap(b *testing.B) {
	secrets := syntheticTLSSecrets(b, 2000)
	var total float64
	for b.Loop() {
		total += summaryHeap(b, secrets, Options{})
	}
	b.ReportMetric(total/float64(b.N), "B/secret")
}

// maxStubBytesPerSecret is what a stub may cost (Options.Full): its identity and change record,
// no certificate. ~480 bytes measured on these test Secrets (a summary without items, its
// change record and managedFields stamp), against ~1,270 for a full summary.
const maxStubBytesPerSecret = 600

// TestStubHeapPerSecret: a shard's stubs of the Secrets it does not own keep no certificate.
func TestStubHeapPerSecret(t *testing.T) {
	per := summaryHeap(t, syntheticTLSSecrets(t, 1000), Options{Full: func(string, string) bool { return false }})
	t.Logf("%.0f bytes kept per stub", per)
	if per > maxStubBytesPerSecret {
		t.Errorf("a stub keeps %.0f bytes per TLS Secret, want at most %d: does it keep certificates?", per, maxStubBytesPerSecret)
	}
}
