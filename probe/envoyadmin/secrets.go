package envoyadmin

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/certdrift/certdrift/pki"
)

// redacted is what Envoy prints instead of private key material, in every DataSource form
// (filename, inline_string, and base64 in inline_bytes).
const redacted = "[redacted]"

// addSecret converts one secret entry. A warming secret that never arrived has no payload at all
// ("uninitialized"): it is kept, because a stuck warming secret is itself a finding.
func (d *configDump) addSecret(where string, state SecretState, name, version string, updated time.Time, payload *anyJSON) {
	s := Secret{Name: name, State: state, VersionInfo: version, LastUpdated: updated}
	if payload != nil {
		if sec, ok := payload.Msg.(*secretJSON); ok {
			fillSecret(&s, sec)
		} else {
			d.skip(where, payload.URL, payload.unknown("tls.v3.Secret"))
		}
	}
	d.Secrets = append(d.Secrets, s)
}

func fillSecret(s *Secret, sec *secretJSON) {
	if s.Name == "" {
		s.Name = sec.Name
	}
	if tc := sec.TLSCertificate; tc != nil {
		s.HasCertificate = true
		chain := tc.CertificateChain
		if chain != nil {
			s.CertFile = chain.Filename
		}
		if b, ok := inlineData(chain); ok {
			s.Chain, s.ChainErr = parseInline(b, "certificate_chain")
		}
		s.KeyRedacted = isRedacted(tc.PrivateKey) || isRedacted(tc.Pkcs12)
		// A key file name is kept only when Envoy printed it; recent Envoys redact the name too.
		if k := tc.PrivateKey; k != nil && k.Filename != redacted {
			s.KeyFile = k.Filename
		}
		if tc.WatchedDirectory != nil {
			s.WatchedDir = tc.WatchedDirectory.Path
		}
		if s.WatchedDir == "" && chain != nil && chain.WatchedDirectory != nil {
			s.WatchedDir = chain.WatchedDirectory.Path
		}
	}
	if vc := sec.ValidationContext; vc != nil {
		s.HasValidation = true
		fillValidation(s, vc)
	}
}

func fillValidation(s *Secret, vc *validationJSON) {
	ca := vc.TrustedCA
	if ca != nil {
		s.CAFile = ca.Filename
	}
	// A validation context watching the Secret volume's directory (the kubelet's ..data swap)
	// ties the bundle to that volume, as the certificate's watched directory does.
	if s.WatchedDir == "" && vc.WatchedDirectory != nil {
		s.WatchedDir = vc.WatchedDirectory.Path
	}
	if s.WatchedDir == "" && ca != nil && ca.WatchedDirectory != nil {
		s.WatchedDir = ca.WatchedDirectory.Path
	}
	var errs []error
	if b, ok := inlineData(ca); ok {
		var err error
		s.ValidationCA, err = parseInline(b, "trusted_ca")
		errs = append(errs, err)
	}
	if cv := vc.CustomValidatorConfig; cv != nil {
		bundles, err := spiffeBundles(cv.Name, cv.TypedConfig)
		s.SPIFFEBundles = bundles
		errs = append(errs, err)
	}
	s.ValidationCAErr = errors.Join(errs...)
}

// spiffeBundles reads the per-trust-domain bundles of Envoy's SPIFFE validator (SPIRE and Istio
// multi-cluster setups put their roots there instead of in trusted_ca).
func spiffeBundles(name string, cfg *anyJSON) (map[string][]*x509.Certificate, error) {
	sp, ok := cfg.msg().(*spiffeJSON)
	if !ok {
		if cfg != nil && (cfg.Msg != nil || knownUnread[typeName(cfg.URL)]) {
			return nil, nil // another validator certdrift knows: nothing it can read
		}
		return nil, fmt.Errorf("custom_validator_config %q: %w", name, cfg.unknown("SPIFFECertValidatorConfig"))
	}
	out := map[string][]*x509.Certificate{}
	var errs []error
	for _, td := range sp.TrustDomains {
		b, ok := inlineData(td.TrustBundle)
		if !ok {
			continue
		}
		certs, err := parseInline(b, "trust_domains["+td.Name+"]")
		if err != nil {
			errs = append(errs, err)
		}
		out[td.Name] = append(out[td.Name], certs...)
	}
	return out, errors.Join(errs...)
}

// inlineData returns the bytes of an inline DataSource.
func inlineData(ds *dataSourceJSON) ([]byte, bool) {
	switch {
	case ds == nil:
		return nil, false
	case ds.InlineBytes != nil:
		return *ds.InlineBytes, true
	case ds.InlineString != nil:
		return []byte(*ds.InlineString), true
	}
	return nil, false
}

func isRedacted(ds *dataSourceJSON) bool {
	if ds == nil {
		return false
	}
	if ds.Filename == redacted {
		return true
	}
	b, _ := inlineData(ds)
	return string(b) == redacted
}

func parseInline(b []byte, field string) ([]*x509.Certificate, error) {
	certs, err := pki.ParseCertificates(b, pki.Limits{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return certs, nil
}
