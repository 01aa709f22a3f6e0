package kube

import (
	"crypto/x509"
	"fmt"
	"path"
	"strings"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/files"
)

// SecretSourceName is the files.Source name of a Secret's observation: "namespace/name", the
// form Envoy Gateway uses for SDS secret names and Istio's kubernetes://ns/name minus its scheme.
func SecretSourceName(namespace, name string) string { return namespace + "/" + name }

// ConfigMapSourceName is the files.Source name of a ConfigMap's observation.
func ConfigMapSourceName(namespace, name string) string {
	return "configmap:" + namespace + "/" + name
}

// ParseSourceName reads a desired source name of the Kubernetes mode ("namespace/name" for a
// Secret, "configmap:namespace/name") back into a reference; false for anything else.
func ParseSourceName(s string) (SourceRef, bool) {
	kind := "Secret"
	if rest, ok := strings.CutPrefix(s, "configmap:"); ok {
		kind, s = "ConfigMap", rest
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || !ValidRef(ns, name) {
		return SourceRef{}, false
	}
	return SourceRef{Kind: kind, Namespace: ns, Name: name}, true
}

// Observations converts the snapshot into files.Observation values, one per Secret and one per
// ConfigMap. Paths are "namespace/name/key" (never a real file path, so they cannot be mistaken
// for the paths Envoy reports). Certificates are rebuilt from their DER; no private key is
// involved (Item.Key carries only the public half).
func (s *Snapshot) Observations() []files.Observation {
	out := make([]files.Observation, 0, len(s.Secrets)+len(s.ConfigMaps))
	bundles := map[*Bundle]bundleX509{}
	for i := range s.Secrets {
		sec := s.Secrets[i]
		o := files.Observation{
			Source:    files.Source{Name: SecretSourceName(sec.Namespace, sec.Name)},
			ChangedAt: sec.ChangedAt,
			Err:       sec.Err,
		}
		for j := range sec.Items {
			o.Items = append(o.Items, item(sec, &sec.Items[j], bundles))
		}
		out = append(out, o)
	}
	for i := range s.ConfigMaps {
		cm := &s.ConfigMaps[i]
		o := files.Observation{
			Source:    files.Source{Name: ConfigMapSourceName(cm.Namespace, cm.Name)},
			ChangedAt: cm.ChangedAt,
			Err:       cm.Err,
		}
		for _, kb := range cm.Bundles {
			it := files.Item{Name: kb.Key, CAPath: path.Join(cm.Namespace, cm.Name, kb.Key), CAErr: kb.Err}
			if kb.Bundle != nil {
				bx := toX509(kb.Bundle, bundles)
				it.CA, it.CAErr = bx.certs, firstErr(it.CAErr, bx.err)
			}
			o.Items = append(o.Items, it)
		}
		out = append(out, o)
	}
	return out
}

type bundleX509 struct {
	certs []*x509.Certificate
	err   error
}

func item(sec *SecretSummary, it *ItemSummary, bundles map[*Bundle]bundleX509) files.Item {
	p := func(key string) string {
		if key == "" {
			return ""
		}
		return path.Join(sec.Namespace, sec.Name, key)
	}
	fi := files.Item{Name: it.Name, CertPath: p(it.CertKey), KeyPath: p(it.KeyKey), CAPath: p(it.CAKey),
		ChainErr: it.ChainErr, KeyErr: it.KeyErr, CAErr: it.CAErr}
	if len(it.Chain) > 0 {
		chain, err := parseDER(it.Chain)
		fi.Chain, fi.ChainErr = chain, firstErr(fi.ChainErr, err)
	}
	if it.Key != nil {
		pub := it.Key.Public
		if it.Key.Matches && len(fi.Chain) > 0 {
			// The summary keeps no key when it matched the leaf (KeySummary.Public).
			pub = fi.Chain[0].PublicKey
		}
		fi.Key = &pki.KeyInfo{Public: pub, Algorithm: it.Key.Algorithm, Format: it.Key.Format}
	}
	if it.CA != nil {
		bx := toX509(it.CA, bundles)
		fi.CA, fi.CAErr = bx.certs, firstErr(fi.CAErr, bx.err)
	}
	return fi
}

// toX509 parses a shared bundle once per conversion.
func toX509(b *Bundle, cache map[*Bundle]bundleX509) bundleX509 {
	if bx, ok := cache[b]; ok {
		return bx
	}
	certs, err := parseDER(b.Certs)
	bx := bundleX509{certs, err}
	cache[b] = bx
	return bx
}

func parseDER(cs []Cert) ([]*x509.Certificate, error) {
	out := make([]*x509.Certificate, 0, len(cs))
	for i, c := range cs {
		// The DER parsed once already; failing now would mean memory corruption, but it must
		// still not panic.
		x, err := x509.ParseCertificate(c.DER)
		if err != nil {
			return nil, fmt.Errorf("certificate %d (%s): %w", i+1, c.Fingerprint(), err)
		}
		out = append(out, x)
	}
	return out, nil
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// ValidRef reports whether ns and name can name a Secret or ConfigMap: a DNS label and a DNS
// subdomain (RFC 1123, as the API server validates them). Written here rather than taken from
// apimachinery's validation package so that this package links no Kubernetes client code
// (TestValidRefMatchesAPIMachinery keeps the two in step).
func ValidRef(ns, name string) bool {
	return IsDNSLabel(ns) && IsDNSSubdomain(name)
}

// IsDNSLabel reports whether s is an RFC 1123 label: 1 to 63 lower-case letters, digits and '-',
// starting and ending with a letter or digit (a namespace name).
func IsDNSLabel(s string) bool { return len(s) <= 63 && labelChars(s) }

// IsDNSSubdomain reports whether s is an RFC 1123 subdomain: at most 253 characters, labels
// separated by dots (a Secret or ConfigMap name). As in apimachinery, one label of a subdomain is
// not limited to 63 characters.
func IsDNSSubdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !labelChars(label) {
			return false
		}
	}
	return true
}

// labelChars reports whether s is non-empty, of lower-case letters, digits and '-', and starts
// and ends with a letter or digit.
func labelChars(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}
