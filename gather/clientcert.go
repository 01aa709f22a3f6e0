package gather

import (
	"crypto/tls"

	"github.com/certdrift/certdrift/internal/boundedfile"
	"github.com/certdrift/certdrift/pki"
)

// loadClientCert is tls.LoadX509KeyPair through boundedfile: the files named by
// client_cert.cert_file/key_file may be a FIFO or /dev/zero, which LoadX509KeyPair would wait on
// forever or read until the process dies. Its errors name the file and the problem, never bytes.
func loadClientCert(certFile, keyFile string) (tls.Certificate, error) {
	max := int64(pki.DefaultLimits.MaxBytes)
	certPEM, _, err := boundedfile.Read(certFile, max)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, _, err := boundedfile.Read(keyFile, max)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}
