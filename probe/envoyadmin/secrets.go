package envoyadmin

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// redacted is what Envoy prints instead of private key material, in every DataSource form
// (filename, inline_string, and base64 in inline_bytes).
const redacted = "[redacted]"

// addSecret converts one secret entry. A warming secret that never arrived has no payload at all
// ("uninitialized"): it is kept, because a stuck warming secret is itself a finding. A payload
// that cannot be read at all is the Secret's Err.
func (d *configDump) addSecret(state envoystate.SecretState, name, version string, updated time.Time, payload *caught[anyJSON]) {
	s := envoystate.Secret{Name: name, State: state, VersionInfo: version, LastUpdated: updated}
	if payload != nil && payload.Set {
		if payload.Err != nil {
			s.Err = fieldErr("secret", payload.Err)
		} else {
			m, err := payload.V.as(tSecret)
			switch sec := m.(type) {
			case *secretJSON:
				fillSecret(&s, sec)
			default:
				if err == nil {
					err = payload.V.unknown("tls.v3.Secret")
				}
				s.Err = fieldErr("secret", err)
			}
		}
	}
	d.Secrets = append(d.Secrets, s)
}

func fillSecret(s *envoystate.Secret, sec *secretJSON) {
	if s.Name == "" {
		s.Name = sec.Name
	}
	if tc := sec.TLSCertificate; tc != nil && tc.Set {
		s.HasCertificate = true
		if tc.Err != nil {
			s.ChainErr = tc.at("tls_certificate")
		} else {
			fillCertificate(s, &tc.V)
		}
	}
	if vc := sec.ValidationContext; vc != nil && vc.Set {
		s.HasValidation = true
		if vc.Err != nil {
			s.ValidationCAErr = vc.at("validation_context")
		} else {
			v := readValidation(&vc.V, "validation_context")
			s.ValidationCA, s.ValidationCAErr, s.CAFile, s.CAWatchedDir, s.SPIFFEBundles = v.ca, v.err, v.file, v.watchedDir, v.spiffe
		}
	}
}

func fillCertificate(s *envoystate.Secret, tc *tlsCertificateJSON) {
	const path = "tls_certificate.certificate_chain"
	chain := tc.CertificateChain
	switch {
	case chain != nil && chain.Set:
		s.Chain, s.CertFile, s.ChainErr = readCerts(chain, path)
	case tc.Pkcs12 != nil && tc.Pkcs12.Set:
		s.ChainErr = errors.New("tls_certificate.pkcs12: the certificate is in a PKCS#12 bundle, which the admin API redacts with the key")
	default:
		s.ChainErr = fmt.Errorf("%s: missing", path)
	}
	s.KeyRedacted = isRedacted(tc.PrivateKey) || isRedacted(tc.Pkcs12)
	// A key file name is kept only when Envoy printed it; recent Envoys redact the name too.
	if k := tc.PrivateKey; k != nil && k.Err == nil && k.V.Filename != redacted {
		s.KeyFile = k.V.Filename
	}
	if tc.WatchedDirectory != nil {
		s.WatchedDir = tc.WatchedDirectory.Path
	}
	if s.WatchedDir == "" && chain != nil && chain.V.WatchedDirectory != nil {
		s.WatchedDir = chain.V.WatchedDirectory.Path
	}
}

// validation is what certdrift reads of a CertificateValidationContext.
type validation struct {
	ca         []*x509.Certificate
	file       string
	watchedDir string
	spiffe     map[string][]*x509.Certificate
	err        error
}

// readValidation reads a validation context found at path. A context with no trusted_ca and no
// validator (only SAN matchers, say) is not an error; trust that is somewhere certdrift cannot see
// is.
func readValidation(vc *validationJSON, path string) validation {
	var (
		v    validation
		errs []error
	)
	// An empty trusted_ca ({}) is how Envoy prints one that is not set (SPIRE's SPIFFE validator
	// configs have one).
	if ca := vc.TrustedCA; ca != nil && ca.Set && (ca.Err != nil || ca.V != (dataSourceJSON{})) {
		var err error
		v.ca, v.file, err = readCerts(ca, path+".trusted_ca")
		errs = append(errs, err)
		if ca.V.WatchedDirectory != nil {
			v.watchedDir = ca.V.WatchedDirectory.Path
		}
	}
	if vc.WatchedDirectory != nil {
		v.watchedDir = vc.WatchedDirectory.Path
	}
	if cv := vc.CustomValidatorConfig; cv != nil {
		var err error
		v.spiffe, err = spiffeBundles(cv.Name, cv.TypedConfig, path+".custom_validator_config")
		errs = append(errs, err)
	}
	if vc.CACertificateProviderInstance {
		errs = append(errs, fmt.Errorf("%s.ca_certificate_provider_instance: the CAs come from a certificate provider, whose certificates the admin API does not show", path))
	}
	v.err = errors.Join(errs...)
	return v
}

// spiffeBundles reads the per-trust-domain bundles of Envoy's SPIFFE validator (SPIRE and Istio
// multi-cluster setups put their roots there instead of in trusted_ca).
func spiffeBundles(name string, cfg *anyJSON, path string) (map[string][]*x509.Certificate, error) {
	sp, ok := cfg.msg().(*spiffeJSON)
	if !ok {
		if cfg != nil && (cfg.Msg != nil || knownUnread[typeName(cfg.URL)]) {
			return nil, nil // another validator certdrift knows: nothing it can read
		}
		return nil, fmt.Errorf("%s (%q).typed_config: %w: its trust anchors are not read", path, previewN([]byte(name), 80), cfg.unknown("SPIFFECertValidatorConfig"))
	}
	out := map[string][]*x509.Certificate{}
	var errs []error
	for i, td := range sp.TrustDomains {
		if td.TrustBundle == nil || !td.TrustBundle.Set {
			continue
		}
		p := fmt.Sprintf("%s.typed_config.trust_domains[%d] (%s).trust_bundle", path, i, previewN([]byte(td.Name), 80))
		certs, _, err := readCerts(td.TrustBundle, p)
		if err != nil {
			errs = append(errs, err)
		}
		out[td.Name] = append(out[td.Name], certs...)
	}
	return out, errors.Join(errs...)
}

// readCerts reads a DataSource that holds certificates, found at path: the certificates when they
// are inline (with every block that parses, even when another does not), or the file name. The
// error names the field and says why; it never quotes the bytes.
func readCerts(ds *caught[dataSourceJSON], path string) (certs []*x509.Certificate, file string, err error) {
	if ds.Err != nil {
		return nil, "", ds.at(path)
	}
	v := &ds.V
	switch {
	case v.InlineBytes != nil:
		certs, err = parseInline(*v.InlineBytes, path+".inline_bytes")
	case v.InlineString != nil:
		certs, err = parseInline([]byte(*v.InlineString), path+".inline_string")
	case v.Filename != "":
		file = v.Filename
	case v.EnvironmentVariable != "":
		err = fmt.Errorf("%s.environment_variable (%s): the value is not in the dump", path, previewN([]byte(v.EnvironmentVariable), 80))
	default:
		err = fmt.Errorf("%s: empty (no filename, inline_bytes or inline_string)", path)
	}
	return certs, file, err
}

func isRedacted(ds *caught[dataSourceJSON]) bool {
	if ds == nil || ds.Err != nil {
		return false
	}
	v := &ds.V
	switch {
	case v.Filename == redacted:
		return true
	case v.InlineBytes != nil:
		return string(*v.InlineBytes) == redacted
	case v.InlineString != nil:
		return *v.InlineString == redacted
	}
	return false
}

// parseInline parses inline certificate bytes found at field. A bundle with a bad block keeps the
// blocks that parse, so one bad CA neither hides the good ones nor passes unnoticed.
func parseInline(b []byte, field string) ([]*x509.Certificate, error) {
	if string(bytes.TrimSpace(b)) == redacted {
		return nil, fmt.Errorf("%s: Envoy printed %q in place of the certificate", field, redacted)
	}
	certs, err := pki.ParseCertificates(b, pki.Limits{})
	if err == nil {
		return certs, nil
	}
	if blocks := certBlocks(b); len(blocks) > 1 && !errors.Is(err, pki.ErrTooLarge) {
		var errs []error
		for i, blk := range blocks {
			c, err := pki.ParseCertificates(blk, pki.Limits{})
			if err != nil {
				errs = append(errs, fmt.Errorf("certificate %d of %d: %w", i+1, len(blocks), err))
				continue
			}
			certs = append(certs, c...)
		}
		err = errors.Join(errs...)
	}
	return certs, fmt.Errorf("%s: %w", field, err)
}

// certBlocks splits PEM text at each certificate BEGIN line, each part running to the next BEGIN
// line of any kind; other blocks are left out, as pki.ParseCertificates skips them.
func certBlocks(b []byte) [][]byte {
	const begin = "-----BEGIN "
	var starts []int
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(begin))
		if i < 0 {
			break
		}
		starts = append(starts, off+i)
		off += i + len(begin)
	}
	var out [][]byte
	for k, st := range starts {
		end := len(b)
		if k+1 < len(starts) {
			end = starts[k+1]
		}
		part := b[st:end]
		rest := part[len(begin):]
		if bytes.HasPrefix(rest, []byte("CERTIFICATE-----")) || bytes.HasPrefix(rest, []byte("TRUSTED CERTIFICATE-----")) ||
			bytes.HasPrefix(rest, []byte("X509 CERTIFICATE-----")) {
			out = append(out, part)
		}
	}
	return out
}
