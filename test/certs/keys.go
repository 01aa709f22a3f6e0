package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"sync"
)

// rsaCache holds one RSA key per size for the whole process: RSA generation dominates test time
// otherwise (~100ms for 2048 bits, more under -race), and sharing a key between unrelated test
// certificates is harmless. Tests that need two different RSA keys use WithFreshKey.
var rsaCache struct {
	sync.Mutex
	keys map[int]*rsa.PrivateKey
}

func cachedRSA(bits int) (*rsa.PrivateKey, error) {
	rsaCache.Lock()
	defer rsaCache.Unlock()
	if k, ok := rsaCache.keys[bits]; ok {
		return k, nil
	}
	k, err := generateRSA(bits)
	if err != nil {
		return nil, err
	}
	if rsaCache.keys == nil {
		rsaCache.keys = map[int]*rsa.PrivateKey{}
	}
	rsaCache.keys[bits] = k
	return k, nil
}

func generateRSA(bits int) (*rsa.PrivateKey, error) {
	// Go 1.24+ refuses RSA keys below 1024 bits only with GODEBUG; 1024 is still allowed, which is
	// what the weak-crypto tests need.
	return rsa.GenerateKey(rand.Reader, bits)
}

func newKey(o *options) (crypto.Signer, error) {
	if o.key != nil {
		return o.key, nil
	}
	switch o.keyType {
	case ECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case ECDSAP384:
		return ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case ECDSAP224:
		return ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	case Ed25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	case RSA2048, RSA1024:
		bits := 2048
		if o.keyType == RSA1024 {
			bits = 1024
		}
		if o.freshKey {
			return generateRSA(bits)
		}
		return cachedRSA(bits)
	}
	return nil, fmt.Errorf("unknown key type %d", o.keyType)
}

// EncodeKey encodes key as PEM in the requested format. It is exported so that tests can build
// odd inputs (e.g. an RSA key in PKCS#8 next to a certificate) without repeating the switch.
func EncodeKey(key crypto.Signer, f KeyFormat) ([]byte, error) {
	if f == FormatDefault {
		switch key.(type) {
		case *rsa.PrivateKey:
			f = PKCS1
		case *ecdsa.PrivateKey:
			f = SEC1
		default:
			f = PKCS8
		}
	}
	switch f {
	case PKCS1:
		k, ok := key.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("PKCS#1 needs an RSA key, have %T", key)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), nil
	case SEC1:
		k, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("SEC1 needs an ECDSA key, have %T", key)
		}
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, fmt.Errorf("encode SEC1 key: %w", err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
	case PKCS8:
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("encode PKCS#8 key: %w", err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
	}
	return nil, fmt.Errorf("unknown key format %d", f)
}
