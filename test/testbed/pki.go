package testbed

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// authority is the testbed's single CA. It signs every serving and client certificate, so one
// CA file is the client CA, the kubelet CA and the root CA handed to pods.
type authority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

// certValidity is long enough for `make testbed` left running for a day, short enough that a
// leaked file is worthless soon.
const certValidity = 48 * time.Hour

func newAuthority() (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate testbed CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "certdrift-testbed-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign testbed CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse testbed CA: %w", err)
	}
	return &authority{cert: cert, certPEM: pemBlock("CERTIFICATE", der), key: key}, nil
}

// keyPair is a PEM certificate and its PEM private key. The key is written only to 0600 files
// and kubeconfigs; it must never reach a log or an error.
type keyPair struct {
	certPEM, keyPEM []byte
}

// issue signs a leaf. Client certificates carry the user in CN and groups in O, which is how
// the API server's x509 authenticator reads them.
func (a *authority) issue(cn string, orgs []string, dnsNames []string, ips []net.IP, usage x509.ExtKeyUsage) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generate key for %q: %w", cn, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("sign certificate for %q: %w", cn, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return keyPair{}, fmt.Errorf("encode key for %q: %w", cn, err)
	}
	return keyPair{certPEM: pemBlock("CERTIFICATE", der), keyPEM: keyPEM}, nil
}

func (a *authority) clientCert(user string, groups ...string) (keyPair, error) {
	return a.issue(user, groups, nil, nil, x509.ExtKeyUsageClientAuth)
}

func (a *authority) servingCert(cn string, dnsNames []string, ips []net.IP) (keyPair, error) {
	return a.issue(cn, nil, dnsNames, ips, x509.ExtKeyUsageServerAuth)
}

// serviceAccountKey returns the PEM private and public halves of the key that signs
// service-account tokens (ES256).
func serviceAccountKey() (private, public []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate service-account signing key: %w", err)
	}
	private, err = encodeKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode service-account signing key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encode service-account public key: %w", err)
	}
	return private, pemBlock("PUBLIC KEY", der), nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pemBlock("PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		// crypto/rand does not fail on Linux; a fixed serial would still give a valid chain.
		return big.NewInt(time.Now().UnixNano())
	}
	return n.Add(n, big.NewInt(1))
}

// writeFiles writes name → content under dir with mode 0600 (keys live among them).
func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}
