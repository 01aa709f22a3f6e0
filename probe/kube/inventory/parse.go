package inventory

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/kube"
)

// parser turns Secret and ConfigMap data into summaries. It is shared by every informer of an
// Inventory and safe for concurrent use.
type parser struct {
	limits   pki.Limits
	maxItems int
	bundles  *bundleCache
}

// secretData is the part of a Secret the parser reads; keeping it apart from corev1.Secret keeps
// the parser testable without the API types.
type secretData struct {
	namespace, name string
	data            map[string][]byte
}

// items parses every item that layouts find in d (itemRefs).
func (p *parser) items(d secretData, layouts []Layout, fixed bool, now time.Time) ([]kube.ItemSummary, error) {
	refs, err := p.itemRefs(d, layouts, fixed)
	return p.parseItems(d, refs, now), err
}

// parseItems parses the items refs name; nil when there are none.
func (p *parser) parseItems(d secretData, refs []itemRef, now time.Time) []kube.ItemSummary {
	if len(refs) == 0 {
		return nil
	}
	out := make([]kube.ItemSummary, len(refs))
	for i, ref := range refs {
		out[i] = p.item(d, ref, now)
	}
	return out
}

// itemRefs lists the items that layouts find in d, from its keys alone: nothing is parsed, so a
// stub (Options.Full) and its change digest cost no certificate or key parsing. fixed says that
// a missing certificate key is an error (a kubernetes.io/tls Secret without tls.crt), not merely
// "no item here". CA-only layouts (no Cert) are tried only when no certificate layout found an
// item: a Secret holding a leaf is that leaf's source, its ca.crt already read beside it. More
// than maxItems items is an error, with the first maxItems listed.
func (p *parser) itemRefs(d secretData, layouts []Layout, fixed bool) ([]itemRef, error) {
	keys := make([]string, 0, len(d.data))
	for k := range d.data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []itemRef
	seen := map[string]bool{}
	var caOnly []Layout
	for _, l := range layouts {
		if l.Cert == "" {
			caOnly = append(caOnly, l)
			continue
		}
		for _, ref := range matchLayout(l, keys, d.data, fixed) {
			if seen[ref.cert] {
				continue
			}
			seen[ref.cert] = true
			if len(out) >= p.maxItems {
				return out, fmt.Errorf("secret %s/%s: more than %d certificate items; the rest were not read", d.namespace, d.name, p.maxItems)
			}
			out = append(out, ref)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	for _, l := range caOnly {
		if _, ok := d.data[l.CA]; ok {
			// One bundle per Secret: the first CA key of the layouts' order.
			return []itemRef{{ca: l.CA}}, nil
		}
	}
	return nil, nil
}

// itemRef names the keys of one item.
type itemRef struct {
	name, cert, key, ca string
}

// matchLayout lists the items layout l finds among keys (sorted).
func matchLayout(l Layout, keys []string, data map[string][]byte, fixed bool) []itemRef {
	has := func(k string) bool { _, ok := data[k]; return ok }
	ca := ""
	if l.CA != "" && has(l.CA) {
		ca = l.CA
	}
	star := strings.IndexByte(l.Cert, '*')
	if star < 0 {
		if !has(l.Cert) && !fixed {
			return nil
		}
		ref := itemRef{cert: l.Cert, ca: ca}
		if l.Key != "" && has(l.Key) {
			ref.key = l.Key
		}
		return []itemRef{ref}
	}
	prefix, suffix := l.Cert[:star], l.Cert[star+1:]
	var refs []itemRef
	for _, k := range keys {
		if k == l.CA || len(k) <= len(prefix)+len(suffix) || !strings.HasPrefix(k, prefix) || !strings.HasSuffix(k, suffix) {
			continue
		}
		name := k[len(prefix) : len(k)-len(suffix)]
		ref := itemRef{name: name, cert: k, ca: ca}
		if l.Key != "" {
			if kk := strings.Replace(l.Key, "*", name, 1); has(kk) {
				ref.key = kk
			}
		}
		refs = append(refs, ref)
	}
	return refs
}

// item parses one item. Errors name the namespace, the Secret and the key, never the content.
func (p *parser) item(d secretData, ref itemRef, now time.Time) kube.ItemSummary {
	it := kube.ItemSummary{Name: ref.name, CertKey: ref.cert, KeyKey: ref.key, CAKey: ref.ca}
	where := func(key string, err error) error {
		return fmt.Errorf("secret %s/%s key %q: %w", d.namespace, d.name, key, err)
	}
	var chain []*x509.Certificate
	raw, ok := d.data[ref.cert]
	switch {
	case ref.cert == "":
		// A CA-only item (a trust bundle Secret): no certificate was asked for.
	case !ok:
		it.ChainErr = where(ref.cert, errors.New("missing"))
	default:
		var err error
		if chain, err = pki.ParseCertificates(raw, p.limits); err != nil {
			it.ChainErr = where(ref.cert, err)
		} else {
			it.Chain = summarizeCerts(chain)
		}
	}
	if ref.key != "" {
		k, err := pki.ParsePrivateKey(d.data[ref.key], p.limits)
		if err != nil {
			it.KeyErr = where(ref.key, err)
		} else {
			it.Key = &kube.KeySummary{Algorithm: k.Algorithm, Format: k.Format}
			if len(chain) > 0 {
				it.Key.Matches = pki.KeyMatches(chain[0], k.Public)
			}
			if !it.Key.Matches {
				it.Key.Public = k.Public
			}
		}
	}
	if ref.ca != "" {
		b, _, err := p.bundles.parse(d.data[ref.ca], p.limits)
		if err != nil {
			it.CAErr = where(ref.ca, err)
		} else {
			// Whether the bundle verifies the leaf is judged by the audit (CA_BUNDLE_GAP), from
			// the certificates Observations rebuild: an ECDSA signature check per Secret was half
			// of the inventory's CPU at 10,000 Secrets (docs/benchmarks.md), done twice.
			it.CA = b
		}
	}
	return it
}

// summarizeCerts keeps the DER of each certificate (see Cert).
func summarizeCerts(cs []*x509.Certificate) []kube.Cert {
	out := make([]kube.Cert, len(cs))
	for i, c := range cs {
		// A copy: for DER input c.Raw aliases the Secret value, which must not outlive the transform.
		out[i] = kube.Cert{DER: bytes.Clone(c.Raw)}
	}
	return out
}

// configMapBundles parses every key of a ConfigMap whose value holds a PEM certificate block.
func (p *parser) configMapBundles(namespace, name string, data map[string]string) []kube.KeyBundle {
	keys := make([]string, 0, len(data))
	for k, v := range data {
		if strings.Contains(v, "-----BEGIN ") && strings.Contains(v, "CERTIFICATE-----") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]kube.KeyBundle, 0, len(keys))
	for _, k := range keys {
		b, _, err := p.bundles.parse([]byte(data[k]), p.limits)
		kb := kube.KeyBundle{Key: k, Bundle: b}
		if err != nil {
			kb.Err = fmt.Errorf("configmap %s/%s key %q: %w", namespace, name, k, err)
		}
		out = append(out, kb)
	}
	return out
}

// bundleCache shares parsed CA bundles between Secrets whose bundle bytes are identical: in a
// typical cluster thousands of TLS Secrets carry the same ca.crt, and parsing it (and keeping
// it) once is most of the saving. It is bounded; when full it starts over.
type bundleCache struct {
	mu  sync.Mutex
	max int
	m   map[[32]byte]*cachedBundle
}

type cachedBundle struct {
	b      *kube.Bundle
	parsed []*x509.Certificate
	err    error
}

func newBundleCache(max int) *bundleCache {
	return &bundleCache{max: max, m: map[[32]byte]*cachedBundle{}}
}

func (c *bundleCache) parse(raw []byte, lim pki.Limits) (*kube.Bundle, []*x509.Certificate, error) {
	sum := sha256.Sum256(bytes.TrimSpace(raw))
	c.mu.Lock()
	cb, ok := c.m[sum]
	c.mu.Unlock()
	if ok {
		return cb.b, cb.parsed, cb.err
	}
	parsed, err := pki.ParseCertificates(raw, lim)
	cb = &cachedBundle{parsed: parsed, err: err}
	if err == nil {
		cb.b = &kube.Bundle{Certs: summarizeCerts(parsed)}
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[sum] = cb
	c.mu.Unlock()
	return cb.b, cb.parsed, cb.err
}
