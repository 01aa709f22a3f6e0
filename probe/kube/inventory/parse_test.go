package inventory

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/certs"
)

// itemFacts is what the parser tests compare: enough to tell every case apart, no pointers.
type itemFacts struct {
	Name, CertKey, KeyKey, CAKey string
	Leaf                         string // fingerprint
	ChainLen                     int
	KeyMatches                   *bool
	CASize                       int
	ChainErr, KeyErr, CAErr      string // substring expected in the error, "" for none
}

func facts(items []kube.ItemSummary) []itemFacts {
	var out []itemFacts
	for _, it := range items {
		f := itemFacts{Name: it.Name, CertKey: it.CertKey, KeyKey: it.KeyKey, CAKey: it.CAKey, ChainLen: len(it.Chain)}
		if l := it.Leaf(); l != nil {
			f.Leaf = l.Fingerprint()
		}
		if it.Key != nil {
			f.KeyMatches = &it.Key.Matches
		}
		if it.CA != nil {
			f.CASize = len(it.CA.Certs)
		}
		f.ChainErr, f.KeyErr, f.CAErr = errString(it.ChainErr), errString(it.KeyErr), errString(it.CAErr)
		out = append(out, f)
	}
	return out
}

// containsErr makes cmp treat the want error strings as required substrings.
var containsErr = cmp.Comparer(func(a, b itemFacts) bool {
	sub := func(got, want string) bool {
		if want == "" || got == "" {
			return want == got
		}
		return strings.Contains(got, want) || strings.Contains(want, got)
	}
	e := a
	e.ChainErr, e.KeyErr, e.CAErr = b.ChainErr, b.KeyErr, b.CAErr
	return cmp.Equal(e, b) && sub(a.ChainErr, b.ChainErr) && sub(a.KeyErr, b.KeyErr) && sub(a.CAErr, b.CAErr)
})

func ptr[T any](v T) *T { return &v }

func TestParserItems(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("Root A"))
	other := certs.NewCA(t, certs.WithCommonName("Root B"))
	web := ca.Leaf(t, certs.WithDNSNames("web.example"))
	api := ca.Leaf(t, certs.WithDNSNames("api.example"))
	foreign := other.Leaf(t, certs.WithDNSNames("foreign.example"))
	fp := func(l *certs.Leaf) string { return pki.Fingerprint(l.Cert) }

	cases := map[string]struct {
		reason  string
		data    map[string][]byte
		layouts []Layout
		fixed   bool
		want    []itemFacts
		wantErr string
	}{
		"TLSGood": {
			reason: "a kubernetes.io/tls Secret whose key matches and whose ca.crt verifies tls.crt",
			data:   map[string][]byte{"tls.crt": web.CertPEM, "tls.key": web.KeyPEM, "ca.crt": ca.CertPEM},
			fixed:  true,
			want: []itemFacts{{CertKey: "tls.crt", KeyKey: "tls.key", CAKey: "ca.crt", Leaf: fp(web), ChainLen: 1,
				KeyMatches: ptr(true), CASize: 1}},
		},
		"TLSWrongKeyAndCA": {
			reason: "the key of another leaf, and a ca.crt that did not sign tls.crt",
			data:   map[string][]byte{"tls.crt": foreign.CertPEM, "tls.key": web.KeyPEM, "ca.crt": ca.CertPEM},
			fixed:  true,
			want: []itemFacts{{CertKey: "tls.crt", KeyKey: "tls.key", CAKey: "ca.crt", Leaf: fp(foreign), ChainLen: 1,
				KeyMatches: ptr(false), CASize: 1}},
		},
		"TLSMalformedCert": {
			reason: "a truncated PEM block is an error naming namespace, Secret and key",
			data:   map[string][]byte{"tls.crt": web.CertPEM[:len(web.CertPEM)/2], "tls.key": web.KeyPEM},
			fixed:  true,
			want: []itemFacts{{CertKey: "tls.crt", KeyKey: "tls.key", KeyMatches: ptr(false),
				ChainErr: `secret ns/sec key "tls.crt": `}},
		},
		"TLSMissingCert": {
			reason: "a TLS Secret without tls.crt is an item with an error, not silence",
			data:   map[string][]byte{"tls.key": web.KeyPEM},
			fixed:  true,
			want:   []itemFacts{{CertKey: "tls.crt", KeyKey: "tls.key", KeyMatches: ptr(false), ChainErr: `key "tls.crt": missing`}},
		},
		"TLSBadKey": {
			reason: "a key that is not a key: the error names the key, never its content",
			data:   map[string][]byte{"tls.crt": web.CertPEM, "tls.key": []byte("not a key")},
			fixed:  true,
			want:   []itemFacts{{CertKey: "tls.crt", KeyKey: "tls.key", Leaf: fp(web), ChainLen: 1, KeyErr: `secret ns/sec key "tls.key": `}},
		},
		"Merged": {
			reason:  "a.crt/a.key and b.crt/b.key with a shared ca.crt, which the * pattern must not take as an item",
			data:    map[string][]byte{"a.crt": web.CertPEM, "a.key": web.KeyPEM, "b.crt": api.CertPEM, "b.key": web.KeyPEM, "ca.crt": ca.CertPEM, "password": []byte("x")},
			layouts: []Layout{{Cert: "*.crt", Key: "*.key", CA: "ca.crt"}},
			want: []itemFacts{
				{Name: "a", CertKey: "a.crt", KeyKey: "a.key", CAKey: "ca.crt", Leaf: fp(web), ChainLen: 1, KeyMatches: ptr(true), CASize: 1},
				{Name: "b", CertKey: "b.crt", KeyKey: "b.key", CAKey: "ca.crt", Leaf: fp(api), ChainLen: 1, KeyMatches: ptr(false), CASize: 1},
			},
		},
		"OpaqueWithoutCerts": {
			reason:  "an Opaque Secret the layouts do not match has no items",
			data:    map[string][]byte{"password": []byte("hunter2")},
			layouts: []Layout{{Cert: "*.crt", Key: "*.key", CA: "ca.crt"}, {Cert: "tls.crt", Key: "tls.key"}},
		},
		"CAOnly": {
			reason:  "an Opaque Secret holding only ca.crt is one item with a CA bundle, no certificate and no chain error",
			data:    map[string][]byte{"ca.crt": ca.CertPEM},
			layouts: []Layout{{Cert: "tls.crt", Key: "tls.key", CA: "ca.crt"}, {CA: "ca.crt"}},
			want:    []itemFacts{{CAKey: "ca.crt", CASize: 1}},
		},
		"CAOnlySecondKey": {
			reason:  "CA-only layouts are tried in order: Istio's cacert when there is no ca.crt",
			data:    map[string][]byte{"cacert": ca.CertPEM, "note": []byte("x")},
			layouts: CAOnlyLayouts,
			want:    []itemFacts{{CAKey: "cacert", CASize: 1}},
		},
		"CAOnlyNotWithLeaf": {
			reason:  "a Secret with a certificate is that certificate's source: no second, CA-only item",
			data:    map[string][]byte{"tls.crt": web.CertPEM, "ca.crt": ca.CertPEM},
			layouts: append([]Layout{{Cert: "tls.crt", CA: "ca.crt"}}, CAOnlyLayouts...),
			want:    []itemFacts{{CertKey: "tls.crt", CAKey: "ca.crt", Leaf: fp(web), ChainLen: 1, CASize: 1}},
		},
		"CAOnlyBadBundle": {
			reason:  "a CA-only bundle that does not parse is a CA error on the item, not a dropped Secret",
			data:    map[string][]byte{"ca.crt": []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")},
			layouts: CAOnlyLayouts,
			want:    []itemFacts{{CAKey: "ca.crt", CAErr: `secret ns/sec key "ca.crt": `}},
		},
		"CAOnlyNoKey": {
			reason:  "CA-only layouts find nothing in a Secret without their keys",
			data:    map[string][]byte{"password": []byte("hunter2")},
			layouts: CAOnlyLayouts,
		},
		"TooManyItems": {
			reason:  "items beyond the limit are refused with an error",
			data:    map[string][]byte{"a.crt": web.CertPEM, "b.crt": web.CertPEM, "c.crt": web.CertPEM},
			layouts: []Layout{{Cert: "*.crt"}},
			want: []itemFacts{
				{Name: "a", CertKey: "a.crt", Leaf: fp(web), ChainLen: 1},
				{Name: "b", CertKey: "b.crt", Leaf: fp(web), ChainLen: 1},
			},
			wantErr: "more than 2 certificate items",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := &parser{maxItems: 2, bundles: newBundleCache(8)}
			layouts := tc.layouts
			if tc.fixed {
				layouts = []Layout{TLSLayout}
			}
			got, err := p.items(secretData{namespace: "ns", name: "sec", data: tc.data}, layouts, tc.fixed, time.Now())
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("%s\nerror = %v, want containing %q", tc.reason, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, facts(got), containsErr); diff != "" {
				t.Errorf("%s\nitems (-want +got):\n%s", tc.reason, diff)
			}
			for _, it := range got {
				for _, e := range []error{it.ChainErr, it.KeyErr, it.CAErr} {
					if e != nil && strings.Contains(e.Error(), "BEGIN") {
						t.Errorf("error quotes the input: %v", e)
					}
				}
			}
		})
	}
}

func TestBundleCacheShares(t *testing.T) {
	ca := certs.NewCA(t)
	p := &parser{maxItems: 10, bundles: newBundleCache(8)}
	a := p.item(secretData{namespace: "n", name: "a", data: map[string][]byte{"tls.crt": ca.Leaf(t).CertPEM, "ca.crt": ca.CertPEM}}, itemRef{cert: "tls.crt", ca: "ca.crt"}, time.Now())
	b := p.item(secretData{namespace: "n", name: "b", data: map[string][]byte{"tls.crt": ca.Leaf(t).CertPEM, "ca.crt": append([]byte("\n"), ca.CertPEM...)}}, itemRef{cert: "tls.crt", ca: "ca.crt"}, time.Now())
	if a.CA == nil || a.CA != b.CA {
		t.Errorf("two Secrets with the same ca.crt got bundles %p and %p, want one shared bundle", a.CA, b.CA)
	}
}

func TestChangeTracker(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	mf := func(manager string, at time.Time, fields string) []metav1.ManagedFieldsEntry {
		return []metav1.ManagedFieldsEntry{
			{Manager: "labeller", Time: ptr(metav1.NewTime(at.Add(time.Hour))), FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{}}}`)},
			{Manager: manager, Time: ptr(metav1.NewTime(at)), FieldsV1: metav1.NewFieldsV1(fields)},
		}
	}
	type step struct {
		uid     string
		digest  byte
		mf      []metav1.ManagedFieldsEntry
		now     time.Time
		wantAt  time.Time
		wantHow kube.ChangedHow
		wantBy  string
	}
	cases := map[string]struct {
		reason string
		steps  []step
	}{
		"ManagedFieldsFirst": {
			reason: "the entry owning f:data gives the time, not the newer label entry",
			steps:  []step{{uid: "u", digest: 1, mf: mf("cert-manager", t0, `{"f:data":{".":{}}}`), now: t0.Add(time.Minute), wantAt: t0, wantHow: kube.ChangedManagedFields, wantBy: "cert-manager"}},
		},
		"NoManagedFields": {
			reason: "without managedFields the creation time is the only evidence",
			steps:  []step{{uid: "u", digest: 1, now: t0.Add(time.Minute), wantAt: t0.Add(-time.Hour), wantHow: kube.ChangedCreated}},
		},
		"SameDigestKeepsTime": {
			reason: "an update that changes nothing certdrift reads keeps ChangedAt",
			steps: []step{
				{uid: "u", digest: 1, mf: mf("kubectl", t0, `{"f:data":{}}`), now: t0, wantAt: t0, wantHow: kube.ChangedManagedFields, wantBy: "kubectl"},
				{uid: "u", digest: 1, mf: mf("kubectl", t0.Add(time.Hour), `{"f:data":{}}`), now: t0.Add(2 * time.Hour), wantAt: t0, wantHow: kube.ChangedManagedFields, wantBy: "kubectl"},
			},
		},
		"NewDigestNewerStamp": {
			steps: []step{
				{uid: "u", digest: 1, mf: mf("kubectl", t0, `{"f:data":{}}`), now: t0, wantAt: t0, wantHow: kube.ChangedManagedFields, wantBy: "kubectl"},
				{uid: "u", digest: 2, mf: mf("cert-manager", t0.Add(time.Hour), `{"f:data":{}}`), now: t0.Add(2 * time.Hour), wantAt: t0.Add(time.Hour), wantHow: kube.ChangedManagedFields, wantBy: "cert-manager"},
			},
		},
		"NewDigestSameSecondStamp": {
			reason: "a change within the stamp's one-second resolution gets the time it was observed",
			steps: []step{
				{uid: "u", digest: 1, mf: mf("kubectl", t0, `{"f:data":{}}`), now: t0.Add(300 * time.Millisecond), wantAt: t0, wantHow: kube.ChangedManagedFields, wantBy: "kubectl"},
				{uid: "u", digest: 2, mf: mf("kubectl", t0, `{"f:data":{}}`), now: t0.Add(700 * time.Millisecond), wantAt: t0.Add(700 * time.Millisecond), wantHow: kube.ChangedObserved, wantBy: "kubectl"},
			},
		},
		"NewWriterSameSecond": {
			reason: "the creator keeps owning an unchanged ca.crt with the same-second stamp; the new entry is the writer",
			steps: []step{
				{uid: "u", digest: 1, mf: mf("creator", t0, `{"f:data":{}}`), now: t0.Add(100 * time.Millisecond), wantAt: t0, wantHow: kube.ChangedManagedFields, wantBy: "creator"},
				{uid: "u", digest: 2, mf: append(mf("creator", t0, `{"f:data":{}}`), metav1.ManagedFieldsEntry{Manager: "rotator", Time: ptr(metav1.NewTime(t0)), FieldsV1: metav1.NewFieldsV1(`{"f:data":{}}`)}),
					now: t0.Add(600 * time.Millisecond), wantAt: t0.Add(600 * time.Millisecond), wantHow: kube.ChangedObserved, wantBy: "rotator"},
			},
		},
		"Recreated": {
			reason: "a new UID is a new object, not a change of the old one",
			steps: []step{
				{uid: "u1", digest: 1, now: t0, wantAt: t0.Add(-time.Hour), wantHow: kube.ChangedCreated},
				{uid: "u2", digest: 2, now: t0.Add(time.Minute), wantAt: t0.Add(-time.Hour), wantHow: kube.ChangedCreated},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tr := newChangeTracker(newInterner(16))
			for i, s := range tc.steps {
				m := &metav1.ObjectMeta{Namespace: "n", Name: "s", UID: typesUID(s.uid), CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour)), ManagedFields: s.mf}
				sum := &kube.SecretSummary{Namespace: m.Namespace, Name: m.Name, UID: string(m.UID)}
				tr.observe(trackKey{m.Namespace, m.Name, secretKind}, sum, m, digest{s.digest}, s.now, "f:data")
				at, by, how := sum.ChangedAt, sum.ChangedBy, sum.ChangedHow
				if !at.Equal(s.wantAt) || by != s.wantBy || how != s.wantHow {
					t.Errorf("%s\nstep %d: got (%v, %q, %s), want (%v, %q, %s)", tc.reason, i, at, by, how, s.wantAt, s.wantBy, s.wantHow)
				}
			}
		})
	}
}

// TestCAOnlyObservation: a CA-only Secret reaches the desired view as an item with a CA bundle
// and its path, and neither a chain nor a chain error (the audit would take a missing
// certificate as a broken Secret).
func TestCAOnlyObservation(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("Trust CA"))
	p := &parser{maxItems: 10, bundles: newBundleCache(8)}
	items, err := p.items(secretData{namespace: "ns", name: "web-ca", data: map[string][]byte{"ca.crt": ca.CertPEM}}, CAOnlyLayouts, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	snap := kube.Snapshot{Secrets: []*kube.SecretSummary{{Namespace: "ns", Name: "web-ca", Items: items}}}
	obs := snap.Observations()
	if len(obs) != 1 || len(obs[0].Items) != 1 {
		t.Fatalf("observations %+v, want one with one item", obs)
	}
	o, it := obs[0], obs[0].Items[0]
	if o.Ref != (ref.Source{Kind: ref.Secret, Namespace: "ns", Name: "web-ca"}) || o.Err != nil {
		t.Errorf("source %q err %v, want ns/web-ca and no error", o.Ref, o.Err)
	}
	if len(it.Chain) != 0 || it.ChainErr != nil || it.CertPath != "" {
		t.Errorf("item has chain %d, chain error %v, cert path %q; want none", len(it.Chain), it.ChainErr, it.CertPath)
	}
	if len(it.CA) != 1 || it.CAErr != nil || it.CAPath != "ns/web-ca/ca.crt" || !it.CA[0].Equal(ca.Cert) {
		t.Errorf("item CA %d certs (err %v) at %q, want the CA at ns/web-ca/ca.crt", len(it.CA), it.CAErr, it.CAPath)
	}
}

// FuzzParserItems feeds hostile Secret values to every layout kind (fixed, merged, CA-only): no
// panic, and no error quoting the input.
func FuzzParserItems(f *testing.F) {
	ca := certs.NewCA(f, certs.WithCommonName("Fuzz CA"))
	f.Add(ca.CertPEM, []byte(nil), []byte(nil))
	f.Add([]byte(nil), ca.CertPEM, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), ca.CertPEM[:40], ca.CertPEM)
	layouts := append([]Layout{{Cert: "*.crt", Key: "*.key", CA: "ca.crt"}}, CAOnlyLayouts...)
	f.Fuzz(func(t *testing.T, caVal, certVal, other []byte) {
		data := map[string][]byte{}
		if caVal != nil {
			data["ca.crt"] = caVal
		}
		if certVal != nil {
			data["a.crt"] = certVal
			data["tls.crt"] = certVal
		}
		if other != nil {
			data["cacert"] = other
			data["a.key"] = other
		}
		p := &parser{maxItems: 4, bundles: newBundleCache(4)}
		for _, ls := range [][]Layout{layouts, {TLSLayout}, CAOnlyLayouts} {
			items, _ := p.items(secretData{namespace: "ns", name: "s", data: data}, ls, false, time.Now())
			for _, it := range items {
				for _, e := range []error{it.ChainErr, it.KeyErr, it.CAErr} {
					if e != nil && strings.Contains(e.Error(), "BEGIN") {
						t.Fatalf("error quotes the input: %v", e)
					}
				}
				if it.CertKey == "" && (len(it.Chain) > 0 || it.ChainErr != nil) {
					t.Fatalf("CA-only item with a chain (%d) or chain error (%v)", len(it.Chain), it.ChainErr)
				}
			}
		}
	})
}

// TestSecretDigest: the change digest moves with what the inventory reads (a certificate, a key,
// a CA bundle added) and not with what it does not (other keys, a PEM's line breaks).
func TestSecretDigest(t *testing.T) {
	ca := certs.NewCA(t)
	one, two := ca.Leaf(t), ca.Leaf(t)
	p := &parser{maxItems: 10}
	digestOf := func(data map[string][]byte) digest {
		d := secretData{namespace: "ns", name: "s", data: data}
		refs, err := p.itemRefs(d, []Layout{TLSLayout}, true)
		return secretDigest(refs, data, err)
	}
	base := map[string][]byte{"tls.crt": one.CertPEM, "tls.key": one.KeyPEM}
	with := func(k string, v []byte) map[string][]byte {
		m := maps.Clone(base)
		m[k] = v
		return m
	}
	crlf := bytes.ReplaceAll(one.CertPEM, []byte("\n"), []byte("\r\n"))
	der := one.Cert.Raw
	flipped := bytes.Clone(der)
	flipped[len(flipped)-1] ^= 1
	for name, tc := range map[string]struct {
		data map[string][]byte
		same bool
	}{
		"CRLF line ends":       {with("tls.crt", crlf), true},
		"a trailing newline":   {with("tls.crt", append(bytes.Clone(one.CertPEM), '\n')), true},
		"a key nobody reads":   {with("password", []byte("hunter2")), true},
		"another certificate":  {with("tls.crt", two.CertPEM), false},
		"another key":          {with("tls.key", two.KeyPEM), false},
		"a CA bundle added":    {with("ca.crt", ca.CertPEM), false},
		"the certificate gone": {map[string][]byte{"tls.key": one.KeyPEM}, false},
		"DER for PEM":          {with("tls.crt", der), false},
	} {
		if got := digestOf(tc.data) == digestOf(base); got != tc.same {
			t.Errorf("%s: digest unchanged %v, want %v", name, got, tc.same)
		}
	}
	if digestOf(with("tls.crt", der)) == digestOf(with("tls.crt", flipped)) {
		t.Error("DER values differing in one byte have one digest")
	}
}
