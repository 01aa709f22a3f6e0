// Package certgen rotates the certificates of the eg-mtls scenario the way Envoy Gateway's
// `certgen --overwrite` does: one new self-signed CA, a new leaf for every control-plane Secret
// (kubernetes.io/tls with ca.crt, tls.crt, tls.key), and ca.crt either the new CA alone or, with
// the bundle, [newCA, oldCA] — the change proposed in envoyproxy/gateway PR #8534 (issue #4891):
// the new CA first, then the first unexpired CA of the old ca.crt that is not the new one, at
// most two. The rotate command (../rotate) is a thin main around Main.
package certgen

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Target is one Secret certgen writes, and the names its leaf carries.
type Target struct {
	Secret string
	// Service is the Service the leaf's DNS names are derived from (<svc>, <svc>.<ns>,
	// <svc>.<ns>.svc, <svc>.<ns>.svc.cluster.local).
	Service string
}

// Targets are the scenario's Secrets in the order they are written: the proxy's first, so that
// a stepped rotation opens the window where the proxy holds the new leaf while the control
// plane still holds the old trust.
var Targets = []Target{
	{Secret: "envoy", Service: "envoy"},
	{Secret: "envoy-gateway", Service: "envoy-gateway"},
	{Secret: "envoy-rate-limit", Service: "envoy-ratelimit"},
}

// Options control one rotation.
type Options struct {
	Namespace string
	// Bundle writes ca.crt = [newCA, oldCA] instead of [newCA].
	Bundle bool
	// AfterWrite, when set, runs after each Secret is written and before the next one; an
	// error stops the rotation.
	AfterWrite func(secret string) error
	// Log receives one line per Secret written (names, subjects and serials; never keys).
	Log io.Writer
	// Now is the clock used for validity and for dropping expired CAs from the bundle.
	Now func() time.Time
}

// maxSecretPEM bounds the ca.crt read back from an existing Secret.
const maxSecretPEM = 1 << 20

// Rotate mints a new CA and a leaf per Target and creates or overwrites each Secret in order.
func Rotate(ctx context.Context, c kubernetes.Interface, o Options) error {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	ca, err := newCA(now())
	if err != nil {
		return err
	}
	for _, target := range Targets {
		if err := writeSecret(ctx, c, o, target, ca, now(), log); err != nil {
			return err
		}
		if o.AfterWrite != nil {
			if err := o.AfterWrite(target.Secret); err != nil {
				return fmt.Errorf("after writing Secret %s/%s: %w", o.Namespace, target.Secret, err)
			}
		}
	}
	return nil
}

func writeSecret(ctx context.Context, c kubernetes.Interface, o Options, target Target, ca *authority, now time.Time, log io.Writer) error {
	leafPEM, keyPEM, leaf, err := ca.leaf(now, target.Service, o.Namespace)
	if err != nil {
		return fmt.Errorf("mint leaf for Secret %s/%s: %w", o.Namespace, target.Secret, err)
	}
	secrets := c.CoreV1().Secrets(o.Namespace)
	existing, err := secrets.Get(ctx, target.Secret, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get Secret %s/%s: %w", o.Namespace, target.Secret, err)
	}
	bundle := []*x509.Certificate{ca.cert}
	if o.Bundle && existing != nil && err == nil {
		bundle = BundleCAs(ca.cert, parseCAs(existing.Data["ca.crt"]), now)
	}
	data := map[string][]byte{"ca.crt": encodeCerts(bundle...), corev1.TLSCertKey: leafPEM, corev1.TLSPrivateKeyKey: keyPEM}
	if err != nil { // not found
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: target.Secret, Namespace: o.Namespace},
			Type:       corev1.SecretTypeTLS,
			Data:       data,
		}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Secret %s/%s: %w", o.Namespace, target.Secret, err)
		}
	} else {
		existing.Data = data
		if _, err := secrets.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update Secret %s/%s: %w", o.Namespace, target.Secret, err)
		}
	}
	var cas []string
	for _, c := range bundle {
		cas = append(cas, fmt.Sprintf("%q serial %s", c.Subject.CommonName, c.SerialNumber.Text(16)))
	}
	fmt.Fprintf(log, "wrote Secret %s/%s: ca.crt [%s], tls.crt serial %s\n",
		o.Namespace, target.Secret, strings.Join(cas, ", "), leaf.SerialNumber.Text(16))
	return nil
}

// BundleCAs is ca.crt after a rotation with the bundle: the new CA, then the first CA of the
// old bundle that is unexpired at now and not the new CA, so at most two.
func BundleCAs(newCA *x509.Certificate, old []*x509.Certificate, now time.Time) []*x509.Certificate {
	out := []*x509.Certificate{newCA}
	for _, c := range old {
		if c.Equal(newCA) || now.After(c.NotAfter) {
			continue
		}
		return append(out, c)
	}
	return out
}

// parseCAs parses the certificates of a ca.crt, skipping anything that is not one: a broken
// old bundle must not stop a rotation, it is simply not carried over.
func parseCAs(data []byte) []*x509.Certificate {
	if len(data) > maxSecretPEM {
		return nil
	}
	var out []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return out
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func encodeCerts(cs ...*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range cs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

// authority is a CA certgen mints; its key lives only in memory, as certgen's does.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(now time.Time) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "envoy-gateway", Organization: []string{"certdrift eg-mtls " + serial.Text(16)[:8]}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(5 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &authority{cert: cert, key: key}, nil
}

// leaf mints a server-and-client leaf for a Service (Envoy Gateway's control plane, proxies and
// rate limit authenticate each other with these), returning cert PEM, key PEM and the cert.
func (a *authority) leaf(now time.Time, service, ns string) ([]byte, []byte, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: service},
		DNSNames:     []string{service, service + "." + ns, service + "." + ns + ".svc", service + "." + ns + ".svc.cluster.local"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sign leaf: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parse leaf: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return encodeCerts(cert), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), cert, nil
}

func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("random serial: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
