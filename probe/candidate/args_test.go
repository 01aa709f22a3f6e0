package candidate

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/test/certs"
)

// TestArgs: certdrift preflight's --leaf, --bundle and --secret lists, read in order, each with
// the source it names; the first bad argument (its syntax or its file) stops the list with an
// error naming it.
func TestArgs(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("ca"))
	a, b := ca.Leaf(t, certs.WithDNSNames("a.test")), ca.Leaf(t, certs.WithDNSNames("b.test"))
	aPEM := write(t, "a.pem", string(a.ChainPEM()))
	bPEM := write(t, "b.pem", string(b.ChainPEM()))
	caPEM := write(t, "ca.pem", string(ca.CertPEM))
	secret := write(t, "web.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: web, namespace: shop}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: "+b64(a.ChainPEM())+"\n  tls.key: "+b64(a.KeyPEM)+"\n")
	missing := filepath.Join(t.TempDir(), "missing.pem")

	// got is what each candidate is: its source, its file and what it holds.
	type got struct {
		Source, From  string
		Leaf          string // first DNS name of the leaf
		Chain, Bundle int
	}
	summarize := func(cs []desired.Candidate) []got {
		var out []got
		for _, c := range cs {
			g := got{Source: c.Source, From: c.From, Chain: len(c.Chain), Bundle: len(c.Bundle)}
			if len(c.Chain) > 0 && len(c.Chain[0].DNSNames) > 0 {
				g.Leaf = c.Chain[0].DNSNames[0]
			}
			out = append(out, g)
		}
		return out
	}
	cases := map[string]struct {
		reason  string
		read    func() ([]desired.Candidate, error)
		want    []got
		wantErr []string
	}{
		"Leaves": {
			reason: "two leaves, in the order given, each for its source",
			read:   func() ([]desired.Candidate, error) { return Leaves([]string{"web=" + aPEM, "api=" + bPEM}) },
			want: []got{{Source: "web", From: aPEM, Leaf: "a.test", Chain: len(a.Chain())},
				{Source: "api", From: bPEM, Leaf: "b.test", Chain: len(b.Chain())}},
		},
		"Bundles": {
			reason: "a bundle holds every certificate of its file and no leaf",
			read:   func() ([]desired.Candidate, error) { return Bundles([]string{"mesh=" + caPEM}) },
			want:   []got{{Source: "mesh", From: caPEM, Bundle: 1}},
		},
		"SecretNamesItself": {
			reason: "a Secret manifest without SOURCE= is named namespace/name in Kubernetes mode",
			read:   func() ([]desired.Candidate, error) { return SecretManifests([]string{secret}, true) },
			want:   []got{{Source: "shop/web", From: secret, Leaf: "a.test", Chain: len(a.Chain())}},
		},
		"SecretWithSource": {
			reason: "SOURCE= names a manifest's source",
			read:   func() ([]desired.Candidate, error) { return SecretManifests([]string{"front=" + secret}, false) },
			want:   []got{{Source: "front", From: secret, Leaf: "a.test", Chain: len(a.Chain())}},
		},
		"None": {
			reason: "no arguments, no candidates",
			read:   func() ([]desired.Candidate, error) { return Leaves(nil) },
		},
		"LeafWithoutSource": {
			reason:  "a leaf must say which source it is for",
			read:    func() ([]desired.Candidate, error) { return Leaves([]string{"web=" + aPEM, aPEM}) },
			wantErr: []string{"want SOURCE=FILE", aPEM},
		},
		"MissingFile": {
			reason:  "a file that cannot be read stops the list, named",
			read:    func() ([]desired.Candidate, error) { return Bundles([]string{"mesh=" + caPEM, "other=" + missing}) },
			wantErr: []string{"missing.pem"},
		},
		"SecretMissing": {
			reason:  "a manifest that cannot be read stops the list, named",
			read:    func() ([]desired.Candidate, error) { return SecretManifests([]string{secret, missing}, true) },
			wantErr: []string{"missing.pem"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cs, err := tc.read()
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("%s: no error, read %+v", tc.reason, summarize(cs))
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q lacks %q", tc.reason, err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, summarize(cs)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
