package pki_test

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
)

// TestChainCache: the cache gives CheckServedChain's issues and path, reuses them only for the
// same served chain against the same roots (by content, not by pointer), and a changed chain or
// bundle is checked afresh.
func TestChainCache(t *testing.T) {
	root := certs.NewCA(t, certs.WithCommonName("Root"))
	inter := root.Intermediate(t, certs.WithCommonName("Inter"))
	leaf := inter.Leaf(t, certs.WithDNSNames("a.test"))
	rotated := certs.NewCA(t, certs.WithCommonName("Root")) // same name, new key
	other := inter.Leaf(t, certs.WithDNSNames("a.test"))    // same issuer and names, another leaf
	reparse := func(cs []*x509.Certificate) []*x509.Certificate {
		out := make([]*x509.Certificate, len(cs))
		for i, c := range cs {
			x, err := x509.ParseCertificate(c.Raw)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = x
		}
		return out
	}
	full, alone := leaf.Chain(), []*x509.Certificate{leaf.Cert}
	type step struct {
		chain, roots []*x509.Certificate
		want         []pki.ChainIssueKind
		hit          bool // answered from the cache
	}
	cases := map[string]struct {
		reason string
		steps  []step
	}{
		"SameChainAgain": {reason: "the second check of the same chain and roots is a hit",
			steps: []step{{chain: full, roots: cs(root.Cert)}, {chain: full, roots: cs(root.Cert), hit: true}}},
		"SameContentOtherPointers": {reason: "the key is the DER, not the parsed certificate's address (each round parses anew)",
			steps: []step{{chain: full, roots: cs(root.Cert)}, {chain: reparse(full), roots: reparse(cs(root.Cert)), hit: true}}},
		"ChainLosesIntermediate": {reason: "the listener now serves the leaf alone: a miss, and the issue is reported",
			steps: []step{{chain: full, roots: cs(root.Cert)}, {chain: alone, roots: cs(root.Cert), want: []pki.ChainIssueKind{pki.ChainMissingIntermediate}}}},
		"ChainOrderChanges": {reason: "the same certificates in another order are another chain",
			steps: []step{{chain: full, roots: cs(root.Cert)}, {chain: []*x509.Certificate{full[1], full[0]}, roots: cs(root.Cert), want: []pki.ChainIssueKind{pki.ChainWrongOrder}}}},
		"LeafChanges": {reason: "another leaf under the same intermediate is checked again (clean here)",
			steps: []step{{chain: full, roots: cs(root.Cert)}, {chain: other.Chain(), roots: cs(root.Cert)}}},
		"BundleChanges": {reason: "the same chain against a bundle whose root has the same name and another key: a miss, untrusted",
			steps: []step{{chain: full, roots: cs(root.Cert)}, {chain: full, roots: cs(rotated.Cert), want: []pki.ChainIssueKind{pki.ChainUntrusted}}}},
		"BundleGrows": {reason: "[rotated, root] is another bundle than [root], even though both trust the chain",
			steps: []step{{chain: full, roots: cs(root.Cert)}, {chain: full, roots: cs(rotated.Cert, root.Cert)}}},
		"NoRoots": {reason: "structure only without roots, and that is another key than with them",
			steps: []step{{chain: alone, roots: nil}, {chain: alone, roots: cs(root.Cert), want: []pki.ChainIssueKind{pki.ChainMissingIntermediate}}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := pki.NewChainCache(16)
			for i, s := range tc.steps {
				before := c.Stats()
				got := c.Check(s.chain, s.roots)
				direct := pki.CheckServedChain(s.chain, s.roots, time.Now())
				if diff := cmp.Diff(direct.Issues, got.Issues, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s\nstep %d: issues differ from CheckServedChain (-direct +cached):\n%s", tc.reason, i, diff)
				}
				if diff := cmp.Diff(direct.Path, got.Path); diff != "" {
					t.Errorf("%s\nstep %d: path differs (-direct +cached):\n%s", tc.reason, i, diff)
				}
				var kinds []pki.ChainIssueKind
				for _, is := range got.Issues {
					kinds = append(kinds, is.Kind)
				}
				if diff := cmp.Diff(s.want, kinds, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s\nstep %d: issues (-want +got):\n%s", tc.reason, i, diff)
				}
				if hit := c.Stats().Hits > before.Hits; hit != s.hit {
					t.Errorf("%s\nstep %d: hit = %v, want %v", tc.reason, i, hit, s.hit)
				}
				if got.Verify != nil {
					t.Errorf("step %d: a cached report carries a Verify result, which depends on the time", i)
				}
			}
		})
	}

	t.Run("Bounded", func(t *testing.T) {
		c := pki.NewChainCache(2)
		for _, ch := range [][]*x509.Certificate{full, alone, other.Chain()} {
			c.Check(ch, cs(root.Cert))
		}
		if st := c.Stats(); st.Entries > 2 || st.Resets != 1 || st.Misses != 3 {
			t.Errorf("a cache of 2 after 3 distinct chains: %+v, want at most 2 entries after 1 reset", st)
		}
	})
	t.Run("CallerCannotChangeTheCache", func(t *testing.T) {
		c := pki.NewChainCache(4)
		rep := c.Check(alone, cs(root.Cert))
		rep.Issues[0].Message = "changed"
		if again := c.Check(alone, cs(root.Cert)); again.Issues[0].Message == "changed" {
			t.Error("a report's issues alias the cached ones")
		}
	})
	t.Run("Nil", func(t *testing.T) {
		var c *pki.ChainCache
		if rep := c.Check(alone, cs(root.Cert)); !rep.Has(pki.ChainMissingIntermediate) {
			t.Errorf("a nil cache must still check: %s", rep)
		}
	})
}
