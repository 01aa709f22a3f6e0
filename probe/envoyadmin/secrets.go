package envoyadmin

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/certdrift/certdrift/pki"
)

// redacted is what Envoy prints instead of private key material, in every DataSource form
// (filename, inline_string, and base64 in inline_bytes).
const redacted = "[redacted]"

// addSecret converts one secret entry. A warming secret that never arrived has no payload at all
// ("uninitialized"): it is kept, because a stuck warming secret is itself a finding.
func (d *configDump) addSecret(where string, state SecretState, name, version string, updated time.Time, payload *anypb.Any) {
	s := Secret{Name: name, State: state, VersionInfo: version, LastUpdated: updated}
	if payload != nil {
		m, err := unpack(payload)
		if err != nil {
			d.skip(where, payload.GetTypeUrl(), err)
		} else if sec, ok := m.(*tlsv3.Secret); ok {
			fillSecret(&s, sec)
		} else {
			d.skip(where, payload.GetTypeUrl(), errors.New("not a tls.v3.Secret"))
		}
	}
	d.Secrets = append(d.Secrets, s)
}

func fillSecret(s *Secret, sec *tlsv3.Secret) {
	if s.Name == "" {
		s.Name = sec.GetName()
	}
	if tc := sec.GetTlsCertificate(); tc != nil {
		s.HasCertificate = true
		chain := tc.GetCertificateChain()
		s.CertFile = chain.GetFilename()
		if b, ok := inlineData(chain); ok {
			s.Chain, s.ChainErr = parseInline(b, "certificate_chain")
		}
		s.KeyRedacted = isRedacted(tc.GetPrivateKey()) || isRedacted(tc.GetPkcs12())
		// A key file name is kept only when Envoy printed it; recent Envoys redact the name too.
		if f := tc.GetPrivateKey().GetFilename(); f != redacted {
			s.KeyFile = f
		}
		s.WatchedDir = tc.GetWatchedDirectory().GetPath()
		if s.WatchedDir == "" {
			s.WatchedDir = chain.GetWatchedDirectory().GetPath()
		}
	}
	if vc := sec.GetValidationContext(); vc != nil {
		s.HasValidation = true
		fillValidation(s, vc)
	}
}

func fillValidation(s *Secret, vc *tlsv3.CertificateValidationContext) {
	ca := vc.GetTrustedCa()
	s.CAFile = ca.GetFilename()
	var errs []error
	if b, ok := inlineData(ca); ok {
		var err error
		s.ValidationCA, err = parseInline(b, "trusted_ca")
		errs = append(errs, err)
	}
	if cv := vc.GetCustomValidatorConfig(); cv != nil {
		bundles, err := spiffeBundles(cv)
		s.SPIFFEBundles = bundles
		errs = append(errs, err)
	}
	s.ValidationCAErr = errors.Join(errs...)
}

// spiffeBundles reads the per-trust-domain bundles of Envoy's SPIFFE validator (SPIRE and Istio
// multi-cluster setups put their roots there instead of in trusted_ca).
func spiffeBundles(cv *corev3.TypedExtensionConfig) (map[string][]*x509.Certificate, error) {
	m, err := unpack(cv.GetTypedConfig())
	if err != nil {
		return nil, fmt.Errorf("custom_validator_config %q: %w", cv.GetName(), err)
	}
	sp, ok := m.(*tlsv3.SPIFFECertValidatorConfig)
	if !ok {
		return nil, nil // another validator: nothing certdrift can read
	}
	out := map[string][]*x509.Certificate{}
	var errs []error
	for _, td := range sp.GetTrustDomains() {
		b, ok := inlineData(td.GetTrustBundle())
		if !ok {
			continue
		}
		certs, err := parseInline(b, "trust_domains["+td.GetName()+"]")
		if err != nil {
			errs = append(errs, err)
		}
		out[td.GetName()] = append(out[td.GetName()], certs...)
	}
	return out, errors.Join(errs...)
}

// inlineData returns the bytes of an inline DataSource.
func inlineData(ds *corev3.DataSource) ([]byte, bool) {
	switch v := ds.GetSpecifier().(type) {
	case *corev3.DataSource_InlineBytes:
		return v.InlineBytes, true
	case *corev3.DataSource_InlineString:
		return []byte(v.InlineString), true
	}
	return nil, false
}

func isRedacted(ds *corev3.DataSource) bool {
	if ds == nil {
		return false
	}
	if ds.GetFilename() == redacted || ds.GetInlineString() == redacted {
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
