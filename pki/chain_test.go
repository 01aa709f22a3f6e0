package pki_test

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
)

func TestCheckServedChain(t *testing.T) {
	root := certs.NewCA(t, certs.WithCommonName("Root"))
	i1 := root.Intermediate(t, certs.WithCommonName("Inter 1"))
	i2 := i1.Intermediate(t, certs.WithCommonName("Inter 2"))
	leaf := i2.Leaf(t, certs.WithDNSNames("deep.test"))
	direct := root.Leaf(t, certs.WithDNSNames("direct.test"))
	rotated := certs.NewCA(t, certs.WithCommonName("Root")) // same name, new key
	stranger := certs.NewCA(t).Leaf(t)
	selfSigned := certs.NewCA(t, certs.WithCommonName("self"))

	cases := map[string]struct {
		reason   string
		chain    []*x509.Certificate
		roots    []*x509.Certificate
		want     []pki.ChainIssueKind
		wantPath []int
	}{
		"Complete": {reason: "leaf, inter 2, inter 1", chain: cs(leaf.Cert, i2.Cert, i1.Cert), roots: cs(root.Cert),
			wantPath: []int{0, 1, 2}},
		"CompleteWithRoot": {reason: "serving the root too is harmless", chain: cs(leaf.Cert, i2.Cert, i1.Cert, root.Cert), roots: cs(root.Cert),
			wantPath: []int{0, 1, 2, 3}},
		"LeafOnlyDirect": {reason: "a leaf signed by the root needs nothing else", chain: cs(direct.Cert), roots: cs(root.Cert),
			wantPath: []int{0}},
		"MissingIntermediate": {reason: "inter 1 dropped", chain: cs(leaf.Cert, i2.Cert), roots: cs(root.Cert),
			want: []pki.ChainIssueKind{pki.ChainMissingIntermediate}, wantPath: []int{0, 1}},
		"MissingAllIntermediates": {reason: "only the leaf", chain: cs(leaf.Cert), roots: cs(root.Cert),
			want: []pki.ChainIssueKind{pki.ChainMissingIntermediate}, wantPath: []int{0}},
		"WrongOrder": {reason: "intermediates swapped", chain: cs(leaf.Cert, i1.Cert, i2.Cert), roots: cs(root.Cert),
			want: []pki.ChainIssueKind{pki.ChainWrongOrder}, wantPath: []int{0, 2, 1}},
		"IntermediateBeforeLeaf": {reason: "the leaf is not first", chain: cs(i2.Cert, leaf.Cert, i1.Cert), roots: cs(root.Cert),
			want: []pki.ChainIssueKind{pki.ChainWrongOrder}, wantPath: []int{1, 0, 2}},
		"ExtraUnrelated": {reason: "a stranger's certificate appended", chain: cs(leaf.Cert, i2.Cert, i1.Cert, stranger.Cert), roots: cs(root.Cert),
			want: []pki.ChainIssueKind{pki.ChainExtraCert}, wantPath: []int{0, 1, 2}},
		"Duplicate": {reason: "inter 2 served twice", chain: cs(leaf.Cert, i2.Cert, i2.Cert, i1.Cert), roots: cs(root.Cert),
			want: []pki.ChainIssueKind{pki.ChainDuplicate, pki.ChainWrongOrder}, wantPath: []int{0, 1, 3}},
		"RotatedRoot": {reason: "the bundle holds a same-named CA with another key", chain: cs(direct.Cert), roots: cs(rotated.Cert),
			want: []pki.ChainIssueKind{pki.ChainUntrusted}, wantPath: []int{0}},
		"UntrustedSelfSigned": {reason: "a self-signed cert the bundle lacks", chain: cs(selfSigned.Cert), roots: cs(root.Cert),
			want: []pki.ChainIssueKind{pki.ChainUntrusted}, wantPath: []int{0}},
		"IntermediateInBundle": {reason: "the bundle holds inter 1, so the chain stops there legitimately", chain: cs(leaf.Cert, i2.Cert), roots: cs(i1.Cert),
			wantPath: []int{0, 1}},
		"NoRootsStructureOnly": {reason: "without roots a chain ending at an intermediate is fine", chain: cs(leaf.Cert, i2.Cert),
			wantPath: []int{0, 1}},
		"NoRootsWrongOrder": {reason: "structure is still judged without roots", chain: cs(leaf.Cert, i1.Cert, i2.Cert),
			want: []pki.ChainIssueKind{pki.ChainWrongOrder}, wantPath: []int{0, 2, 1}},
		"NoRootsExtra": {reason: "extra cert without roots", chain: cs(direct.Cert, stranger.Cert),
			want: []pki.ChainIssueKind{pki.ChainExtraCert}, wantPath: []int{0}},
		"Empty": {reason: "nothing served", chain: nil, roots: cs(root.Cert),
			want: []pki.ChainIssueKind{pki.ChainEmpty}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rep := pki.CheckServedChain(tc.chain, tc.roots, time.Now())
			var got []pki.ChainIssueKind
			for _, is := range rep.Issues {
				got = append(got, is.Kind)
				if is.Message == "" {
					t.Errorf("%s: issue %s has no message", tc.reason, is.Kind)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: issues (-want +got):\n%s\nreport: %s", tc.reason, diff, rep)
			}
			if diff := cmp.Diff(tc.wantPath, rep.Path); diff != "" {
				t.Errorf("%s: path (-want +got):\n%s", tc.reason, diff)
			}
			if rep.OK() != (len(tc.want) == 0) {
				t.Errorf("%s: OK() = %v", tc.reason, rep.OK())
			}
			for _, k := range tc.want {
				if !rep.Has(k) {
					t.Errorf("%s: Has(%s) = false", tc.reason, k)
				}
			}
			if (len(tc.roots) > 0 && len(tc.chain) > 0) != (rep.Verify != nil) {
				t.Errorf("%s: Verify result present = %v", tc.reason, rep.Verify != nil)
			}
		})
	}
}

func TestCheckServedChainVerifyResult(t *testing.T) {
	root := certs.NewCA(t)
	inter := root.Intermediate(t)
	leaf := inter.Leaf(t)
	rep := pki.CheckServedChain(leaf.Chain(), cs(root.Cert), time.Now())
	if !rep.OK() || rep.Verify == nil || !rep.Verify.OK || rep.Verify.RootIndex != 0 {
		t.Fatalf("complete chain: report %s, verify %+v", rep, rep.Verify)
	}
	if rep.String() != "ok" {
		t.Errorf("String() = %q, want ok", rep.String())
	}
	// Expiry is reported elsewhere, not as a chain problem.
	exp := inter.Leaf(t, certs.Expired())
	rep = pki.CheckServedChain(exp.Chain(), cs(root.Cert), time.Now())
	if !rep.OK() {
		t.Errorf("an expired but complete chain is reported: %s", rep)
	}
	if rep.Verify == nil || rep.Verify.Reason != pki.ReasonExpired {
		t.Errorf("Verify of an expired chain: %+v", rep.Verify)
	}
}
