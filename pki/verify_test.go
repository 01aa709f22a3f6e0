package pki_test

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
)

func TestVerify(t *testing.T) {
	now := time.Now()
	oldCA := certs.NewCA(t, certs.WithCommonName("Mesh CA"))
	// A rotated CA: same name, new key. A name-only check would wrongly accept its leaves.
	newCA := certs.NewCA(t, certs.WithCommonName("Mesh CA"))
	otherCA := certs.NewCA(t)
	inter := oldCA.Intermediate(t)
	expiredRoot := certs.NewCA(t, certs.Expired())
	expiredInter := oldCA.Intermediate(t, certs.Expired())
	futureRoot := certs.NewCA(t, certs.NotYetValid())
	rsaRoot := certs.NewCA(t, certs.WithKeyType(certs.RSA2048))

	oldLeaf := oldCA.Leaf(t)
	newLeaf := newCA.Leaf(t)
	viaInter := inter.Leaf(t)
	clientOnly := oldCA.Leaf(t, certs.WithExtKeyUsage(x509.ExtKeyUsageClientAuth))

	cases := map[string]struct {
		reason        string
		leaf          *x509.Certificate
		intermediates []*x509.Certificate
		roots         []*x509.Certificate
		at            time.Time
		usage         x509.ExtKeyUsage
		wantOK        bool
		wantReason    pki.Reason
		wantRoot      int
		wantRoots     []int
		wantChain     []*x509.Certificate
		wantProblem   *x509.Certificate
	}{
		"DirectRoot": {reason: "leaf signed by the only root", leaf: oldLeaf.Cert, roots: certs2(oldCA),
			wantOK: true, wantRoot: 0, wantRoots: []int{0}, wantChain: cs(oldLeaf.Cert, oldCA.Cert)},
		"RotationBundleOldLeaf": {reason: "[new, old] bundle: the old leaf verifies with index 1", leaf: oldLeaf.Cert, roots: certs2(newCA, oldCA),
			wantOK: true, wantRoot: 1, wantRoots: []int{1}, wantChain: cs(oldLeaf.Cert, oldCA.Cert)},
		"RotationBundleNewLeaf": {reason: "[new, old] bundle: the new leaf verifies with index 0", leaf: newLeaf.Cert, roots: certs2(newCA, oldCA),
			wantOK: true, wantRoot: 0, wantRoots: []int{0}, wantChain: cs(newLeaf.Cert, newCA.Cert)},
		"RotatedCASameName": {reason: "bundle holds only the old CA: the new leaf's issuer name matches but its key does not", leaf: newLeaf.Cert, roots: certs2(oldCA),
			wantReason: pki.ReasonUnknownAuthority, wantRoot: -1},
		"UnknownAuthority": {reason: "unrelated bundle", leaf: oldLeaf.Cert, roots: certs2(otherCA),
			wantReason: pki.ReasonUnknownAuthority, wantRoot: -1},
		"ViaIntermediate": {reason: "intermediate supplied", leaf: viaInter.Cert, intermediates: cs(inter.Cert), roots: certs2(otherCA, oldCA),
			wantOK: true, wantRoot: 1, wantRoots: []int{1}, wantChain: cs(viaInter.Cert, inter.Cert, oldCA.Cert)},
		"MissingIntermediate": {reason: "intermediate not supplied", leaf: viaInter.Cert, roots: certs2(oldCA),
			wantReason: pki.ReasonUnknownAuthority, wantRoot: -1},
		"IntermediateInBundle": {reason: "a bundle may hold the intermediate itself", leaf: viaInter.Cert, roots: certs2(inter),
			wantOK: true, wantRoot: 0, wantRoots: []int{0}, wantChain: cs(viaInter.Cert, inter.Cert)},
		"ExpiredRoot": {reason: "the issuer is there but expired: not a gap in the bundle", leaf: expiredRoot.Leaf(t, certs.Expired()).Cert, roots: certs2(expiredRoot),
			wantReason: pki.ReasonExpired, wantRoot: 0},
		"ExpiredIntermediate": {reason: "the chain exists but its intermediate expired", leaf: expiredInter.Leaf(t).Cert, intermediates: cs(expiredInter.Cert), roots: certs2(oldCA),
			wantReason: pki.ReasonExpired, wantRoot: 0, wantProblem: expiredInter.Cert},
		"ExpiredLeaf": {reason: "the leaf expired", leaf: oldCA.Leaf(t, certs.Expired()).Cert, roots: certs2(oldCA),
			wantReason: pki.ReasonExpired, wantRoot: 0},
		"NotYetValidLeaf": {reason: "the leaf is from the future", leaf: oldCA.Leaf(t, certs.NotYetValid()).Cert, roots: certs2(oldCA),
			wantReason: pki.ReasonNotYetValid, wantRoot: 0},
		"NotYetValidRoot": {reason: "the root is from the future", leaf: futureRoot.Leaf(t, certs.NotYetValid()).Cert, roots: certs2(futureRoot), at: now.Add(30 * time.Minute),
			wantReason: pki.ReasonNotYetValid, wantRoot: 0},
		"AtTimeInPast": {reason: "an injected clock: the root is valid then", leaf: expiredRoot.Leaf(t, certs.Expired()).Cert, roots: certs2(expiredRoot), at: now.Add(-2 * time.Hour),
			wantOK: true, wantRoot: 0, wantRoots: []int{0}},
		"UsageServerOK": {reason: "default leaves are for servers", leaf: oldLeaf.Cert, roots: certs2(oldCA), usage: x509.ExtKeyUsageServerAuth,
			wantOK: true, wantRoot: 0, wantRoots: []int{0}},
		"UsageMismatch": {reason: "a client-only leaf used by a server", leaf: clientOnly.Cert, roots: certs2(oldCA), usage: x509.ExtKeyUsageServerAuth,
			wantReason: pki.ReasonIncompatibleUse, wantRoot: 0},
		"SHA1Signed": {reason: "crypto/x509 refuses SHA-1; say so rather than 'unknown authority'", leaf: rsaRoot.Leaf(t, certs.WithSHA1()).Cert, roots: certs2(rsaRoot),
			wantReason: pki.ReasonInsecureSig, wantRoot: 0},
		"LeafPinnedInBundle": {reason: "a self-signed leaf trusted directly", leaf: otherCA.Cert, roots: certs2(oldCA, otherCA),
			wantOK: true, wantRoot: 1, wantRoots: []int{1}, wantChain: cs(otherCA.Cert)},
		"EmptyBundle": {reason: "no roots", leaf: oldLeaf.Cert, roots: nil, wantReason: pki.ReasonNoRoots, wantRoot: -1},
		"NilEntries": {reason: "nil entries are ignored, and RootIndex is still a position in the caller's slice", leaf: oldLeaf.Cert, roots: []*x509.Certificate{nil, oldCA.Cert}, intermediates: []*x509.Certificate{nil},
			wantOK: true, wantRoot: 1, wantRoots: []int{1}},
		"NilLeaf": {reason: "no leaf", leaf: nil, roots: certs2(oldCA), wantReason: pki.ReasonOther, wantRoot: -1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			at := tc.at
			if at.IsZero() {
				at = now
			}
			got := pki.Verify(tc.leaf, tc.intermediates, tc.roots, at, tc.usage)
			if got.OK != tc.wantOK || got.Reason != tc.wantReason {
				t.Fatalf("%s: OK=%v reason=%q (err %v), want OK=%v reason=%q", tc.reason, got.OK, got.Reason, got.Err, tc.wantOK, tc.wantReason)
			}
			if got.OK != (got.Err == nil) {
				t.Errorf("%s: OK=%v but Err=%v", tc.reason, got.OK, got.Err)
			}
			if got.RootIndex != tc.wantRoot {
				t.Errorf("%s: RootIndex = %d, want %d", tc.reason, got.RootIndex, tc.wantRoot)
			}
			if tc.wantRoot >= 0 && got.RootFingerprint != pki.Fingerprint(tc.roots[tc.wantRoot]) {
				t.Errorf("%s: RootFingerprint does not name root %d", tc.reason, tc.wantRoot)
			}
			if tc.wantRoots != nil {
				if diff := cmp.Diff(tc.wantRoots, got.RootIndexes); diff != "" {
					t.Errorf("%s: RootIndexes (-want +got):\n%s", tc.reason, diff)
				}
			}
			if tc.wantChain != nil {
				if diff := cmp.Diff(fps(tc.wantChain...), fps(got.Chain...)); diff != "" {
					t.Errorf("%s: chain (-want +got):\n%s", tc.reason, diff)
				}
			}
			if tc.wantProblem != nil && (got.Problem == nil || pki.Fingerprint(got.Problem) != pki.Fingerprint(tc.wantProblem)) {
				t.Errorf("%s: Problem is not the expected certificate", tc.reason)
			}
		})
	}
}

func TestVerifyCrossSignedReportsBothRoots(t *testing.T) {
	// One intermediate key certified by two roots: both roots verify the leaf.
	a := certs.NewCA(t)
	b := certs.NewCA(t)
	interA := a.Intermediate(t, certs.WithCommonName("Shared Intermediate"))
	interB := b.Intermediate(t, certs.WithCommonName("Shared Intermediate"), certs.WithKey(interA.Key))
	leaf := interA.Leaf(t)
	res := pki.Verify(leaf.Cert, cs(interA.Cert, interB.Cert), cs(a.Cert, b.Cert), time.Now(), x509.ExtKeyUsageAny)
	if !res.OK {
		t.Fatalf("cross-signed chain does not verify: %v", res.Err)
	}
	if diff := cmp.Diff([]int{0, 1}, res.RootIndexes); diff != "" {
		t.Errorf("RootIndexes (-want +got):\n%s", diff)
	}
	if res.RootIndex != 0 {
		t.Errorf("RootIndex = %d, want the lowest (0) among equal-length chains", res.RootIndex)
	}
}

func TestVerifyHostileBundleIsBounded(t *testing.T) {
	// Sixty self-issued CAs sharing one name and key: each "issued" every other, so a naive
	// search from a leaf they signed, towards an unrelated root, explores 60^8 paths.
	first := certs.NewCA(t, certs.WithCommonName("Loop"), certs.WithoutCfssl())
	inters := []*x509.Certificate{first.Cert}
	for i := 0; i < 60; i++ {
		inters = append(inters, certs.NewCA(t, certs.WithCommonName("Loop"), certs.WithKey(first.Key), certs.WithoutCfssl()).Cert)
	}
	leaf := first.Leaf(t)
	start := time.Now()
	res := pki.Verify(leaf.Cert, inters, cs(certs.NewCA(t).Cert), time.Now(), x509.ExtKeyUsageAny)
	if res.OK || res.Reason != pki.ReasonUnknownAuthority {
		t.Fatalf("OK=%v reason=%q", res.OK, res.Reason)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("verification over a hostile bundle took %v", d)
	}
}

func cs(c ...*x509.Certificate) []*x509.Certificate { return c }

func certs2(as ...*certs.Authority) []*x509.Certificate {
	out := make([]*x509.Certificate, len(as))
	for i, a := range as {
		out[i] = a.Cert
	}
	return out
}
