package pki_test

import (
	//lint:ignore SA1019 building a DSA-keyed certificate struct for WeakCrypto to flag
	"crypto/dsa"
	"crypto/x509"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
)

func TestCheckBundle(t *testing.T) {
	a, b, c := certs.NewCA(t), certs.NewCA(t), certs.NewCA(t)
	expired := certs.NewCA(t, certs.Expired())
	future := certs.NewCA(t, certs.NotYetValid())
	leaf := a.Leaf(t)

	type issue struct {
		Kind  pki.BundleIssueKind
		Index int
	}
	cases := map[string]struct {
		reason string
		bundle []*x509.Certificate
		max    int
		want   []issue
	}{
		"Clean":   {reason: "two valid CAs, limit two", bundle: certs2(a, b), max: 2},
		"NoLimit": {reason: "max 0 means no limit", bundle: certs2(a, b, c), max: 0},
		"TooMany": {reason: "three CAs, limit two", bundle: certs2(a, b, c), max: 2, want: []issue{{pki.BundleTooMany, -1}}},
		"DupNotCounted": {reason: "a duplicate is reported once and not counted as another CA", bundle: certs2(a, b, a), max: 2,
			want: []issue{{pki.BundleDuplicate, 2}}},
		"Expired":     {reason: "an expired CA left behind", bundle: certs2(a, expired), want: []issue{{pki.BundleExpired, 1}}},
		"NotYetValid": {reason: "a CA from the future", bundle: certs2(future, a), want: []issue{{pki.BundleNotYetValid, 0}}},
		"NotACA":      {reason: "a leaf in a trust bundle", bundle: cs(a.Cert, leaf.Cert), want: []issue{{pki.BundleNotCA, 1}}},
		"Several": {reason: "all at once, in bundle order", bundle: cs(expired.Cert, leaf.Cert, expired.Cert, a.Cert), max: 2,
			want: []issue{{pki.BundleExpired, 0}, {pki.BundleNotCA, 1}, {pki.BundleDuplicate, 2}, {pki.BundleTooMany, -1}}},
		"Empty":   {reason: "nothing to judge", bundle: nil, max: 2},
		"NilSkip": {reason: "nil entries ignored", bundle: []*x509.Certificate{nil, a.Cert}, max: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []issue
			for _, is := range pki.CheckBundle(tc.bundle, time.Now(), tc.max) {
				got = append(got, issue{is.Kind, is.Index})
				if is.Message == "" || (is.Kind != pki.BundleTooMany && is.Fingerprint == "") {
					t.Errorf("%s: issue %+v lacks message or fingerprint", tc.reason, is)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: issues (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCoversHost(t *testing.T) {
	ca := certs.NewCA(t)
	l := ca.Leaf(t, certs.WithCommonName("cn-only.test"), certs.WithDNSNames("api.example.com", "*.apps.example.com"),
		certs.WithIPs("10.0.0.7", "fd00::7"))
	cnOnly := ca.Leaf(t, certs.WithCommonName("cn-only.test"), certs.WithURIs("spiffe://td/x"))
	cases := map[string]struct {
		leaf *certs.Leaf
		host string
		want bool
	}{
		"Exact":            {l, "api.example.com", true},
		"CaseInsensitive":  {l, "API.Example.COM", true},
		"TrailingDot":      {l, "api.example.com.", true},
		"Wildcard":         {l, "web.apps.example.com", true},
		"WildcardOneLabel": {l, "a.b.apps.example.com", false},
		"WildcardNotApex":  {l, "apps.example.com", false},
		"Other":            {l, "www.example.com", false},
		"IPv4":             {l, "10.0.0.7", true},
		"IPv4Other":        {l, "10.0.0.8", false},
		"IPv6":             {l, "fd00::7", true},
		"IPv6Brackets":     {l, "[fd00::7]", true},
		"Empty":            {l, "", false},
		"CNIgnored":        {cnOnly, "cn-only.test", false},
		"URINotAHostname":  {cnOnly, "td", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := pki.CoversHost(tc.leaf.Cert, tc.host); got != tc.want {
				t.Errorf("CoversHost(%q) = %v, want %v (SANs %v %v)", tc.host, got, tc.want, tc.leaf.Cert.DNSNames, tc.leaf.Cert.IPAddresses)
			}
		})
	}
	if pki.CoversHost(nil, "x") {
		t.Errorf("CoversHost(nil) = true")
	}
}

func TestWeakCrypto(t *testing.T) {
	rsaCA := certs.NewCA(t, certs.WithKeyType(certs.RSA2048))
	sha1Root := certs.NewCA(t, certs.WithKeyType(certs.RSA2048), certs.WithSHA1())
	weakRoot := certs.NewCA(t, certs.WithKeyType(certs.RSA1024), certs.WithSHA1())
	dsaKey := &dsa.PublicKey{Parameters: dsa.Parameters{P: big.NewInt(23), Q: big.NewInt(11), G: big.NewInt(4)}, Y: big.NewInt(8)}

	cases := map[string]struct {
		cert    *x509.Certificate
		min     int
		mention []string // each a substring of one returned line, in order
	}{
		"ECDSAP256":      {cert: rsaCA.Leaf(t).Cert},
		"RSA2048":        {cert: rsaCA.Leaf(t, certs.WithKeyType(certs.RSA2048)).Cert},
		"Ed25519":        {cert: rsaCA.Leaf(t, certs.WithKeyType(certs.Ed25519)).Cert},
		"RSA1024":        {cert: rsaCA.Leaf(t, certs.WithKeyType(certs.RSA1024)).Cert, mention: []string{"RSA key of 1024 bits is below the minimum of 2048"}},
		"RSA2048Min3072": {cert: rsaCA.Leaf(t, certs.WithKeyType(certs.RSA2048)).Cert, min: 3072, mention: []string{"2048 bits is below the minimum of 3072"}},
		"SHA1Leaf":       {cert: rsaCA.Leaf(t, certs.WithSHA1()).Cert, mention: []string{"SHA1-RSA"}},
		"SHA1SelfSigned": {cert: sha1Root.Cert},
		"WeakRoot":       {cert: weakRoot.Cert, mention: []string{"1024 bits"}},
		"P224":           {cert: rsaCA.Leaf(t, certs.WithKeyType(certs.ECDSAP224)).Cert, mention: []string{"P-224 (224 bits) is below P-256"}},
		"MD5":            {cert: &x509.Certificate{SignatureAlgorithm: x509.MD5WithRSA, PublicKey: rsaCA.Cert.PublicKey}, mention: []string{"MD5-RSA"}},
		"DSA":            {cert: &x509.Certificate{PublicKeyAlgorithm: x509.DSA, PublicKey: dsaKey, SignatureAlgorithm: x509.DSAWithSHA256}, mention: []string{"DSA key", "DSA-SHA256 is deprecated"}},
		"DSAUnparsed":    {cert: &x509.Certificate{PublicKeyAlgorithm: x509.DSA, SignatureAlgorithm: x509.DSAWithSHA1}, mention: []string{"DSA key", "DSA-SHA1"}},
		"Nil":            {cert: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := pki.WeakCrypto(tc.cert, tc.min)
			if len(got) != len(tc.mention) {
				t.Fatalf("WeakCrypto = %q, want %d line(s) mentioning %q", got, len(tc.mention), tc.mention)
			}
			for i, m := range tc.mention {
				if !strings.Contains(got[i], m) {
					t.Errorf("line %d %q does not mention %q", i, got[i], m)
				}
			}
		})
	}
}

func TestIssuedBy(t *testing.T) {
	root := certs.NewCA(t, certs.WithCommonName("Same Name"))
	impostor := certs.NewCA(t, certs.WithCommonName("Same Name"))
	inter := root.Intermediate(t)
	leaf := inter.Leaf(t)
	rsaRoot := certs.NewCA(t, certs.WithKeyType(certs.RSA2048))
	sha1Leaf := rsaRoot.Leaf(t, certs.WithSHA1())
	cases := map[string]struct {
		child, parent *x509.Certificate
		want          bool
	}{
		"Parent":           {inter.Cert, root.Cert, true},
		"Grandparent":      {leaf.Cert, root.Cert, false},
		"SameNameOtherKey": {inter.Cert, impostor.Cert, false},
		"SelfSigned":       {root.Cert, root.Cert, true},
		"Reversed":         {root.Cert, inter.Cert, false},
		"SHA1StillIssued":  {sha1Leaf.Cert, rsaRoot.Cert, true},
		"NilChild":         {nil, root.Cert, false},
		"NilParent":        {leaf.Cert, nil, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := pki.IssuedBy(tc.child, tc.parent); got != tc.want {
				t.Errorf("IssuedBy = %v, want %v", got, tc.want)
			}
		})
	}
	if !pki.SelfSigned(root.Cert) || pki.SelfSigned(leaf.Cert) {
		t.Errorf("SelfSigned wrong for root or leaf")
	}
}
