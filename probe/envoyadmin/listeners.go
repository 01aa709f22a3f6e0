package envoyadmin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/certdrift/certdrift/probe/envoystate"
)

func (d *configDump) staticListener(where string, raw json.RawMessage) {
	var sl staticListenerJSON
	if err := json.Unmarshal(raw, &sl); err != nil {
		d.skipField(where, err)
		return
	}
	d.listener(joinPath(where, "listener"), "static", sl.Listener)
}

func (d *configDump) dynamicListener(where string, raw json.RawMessage) {
	var dl dynamicListenerJSON
	if err := json.Unmarshal(raw, &dl); err != nil {
		d.skipField(where, err)
		return
	}
	for _, st := range []struct {
		field, state string
		s            *listenerStateJSON
	}{
		{"active_state", "active", dl.ActiveState},
		{"warming_state", "warming", dl.WarmingState},
		{"draining_state", "draining", dl.DrainingState},
	} {
		if st.s != nil {
			d.listener(where+"."+st.field+".listener", st.state, st.s.Listener)
		}
	}
}

// listener reads one Listener Any found at where.
func (d *configDump) listener(where, state string, a *anyJSON) {
	if a == nil {
		return // a listener state with no listener: nothing there to read
	}
	m, err := a.as(tListener)
	l, ok := m.(*listenerJSON)
	if !ok {
		if err == nil {
			d.skip(where, a.unknown("listener.v3.Listener"))
		} else {
			d.skipField(where, err)
		}
		return
	}
	fcs, skipped := filterChains(l, state)
	d.Listeners = append(d.Listeners, fcs...)
	for _, s := range skipped {
		s.Part = joinPath(where, s.Part)
		d.Skipped = append(d.Skipped, s)
	}
}

// ParseListenerJSON reads the downstream TLS contexts of one xDS Listener in protojson form (as
// a control plane such as Envoy Gateway emits it, in either field-name style). It is for xDS
// output; admin /config_dump bodies go to ParseConfigDump. Filter chains that could not be read
// are named in the error, the others returned.
func ParseListenerJSON(data []byte) ([]envoystate.FilterChainTLS, error) {
	data = bytes.TrimSpace(data)
	if !json.Valid(data) {
		// Checked first so that a syntax error's offset is the input's, before snakeKeys.
		var v any
		return nil, fmt.Errorf("parse listener: %w", shapeErr(json.Unmarshal(data, &v)))
	}
	var l listenerJSON
	if err := decodeJSON(snakeKeys(data), &l); err != nil {
		return nil, fmt.Errorf("parse listener: %w", err)
	}
	fcs, skipped := filterChains(&l, "")
	if len(skipped) > 0 {
		return fcs, fmt.Errorf("parse listener %q: skipped %v", preview([]byte(l.Name)), skipped)
	}
	return fcs, nil
}

// filterChains returns one FilterChainTLS per filter chain that terminates TLS, and the parts of
// chains that could not be read (paths relative to the listener).
func filterChains(l *listenerJSON, state string) ([]envoystate.FilterChainTLS, []envoystate.ConfigSkip) {
	var (
		out     []envoystate.FilterChainTLS
		skipped []envoystate.ConfigSkip
	)
	addr := ""
	if a := l.Address; a != nil && a.SocketAddress != nil {
		addr = net.JoinHostPort(a.SocketAddress.Address, strconv.FormatUint(uint64(a.SocketAddress.PortValue), 10))
	} else if a != nil && a.Pipe != nil {
		addr = a.Pipe.Path
	}
	chains := l.FilterChains
	if l.DefaultFilterChain != nil {
		chains = append(chains[:len(chains):len(chains)], *l.DefaultFilterChain)
	}
	for i := range chains {
		fc := &chains[i]
		where := fmt.Sprintf("filter_chains[%d]", i)
		if i == len(l.FilterChains) {
			where = "default_filter_chain"
		}
		if fc.Name != "" {
			where += " (" + previewN([]byte(fc.Name), 80) + ")"
		}
		tc, part, err := downstreamTLS(fc)
		if err != nil {
			skipped = append(skipped, envoystate.ConfigSkip{Part: joinPath(where, part), Reason: err.Error()})
			continue
		}
		if tc == nil {
			continue // plaintext chain
		}
		f := envoystate.FilterChainTLS{
			Listener:    l.Name,
			State:       state,
			Address:     addr,
			FilterChain: fc.Name,
		}
		if m := fc.FilterChainMatch; m != nil && len(m.ServerNames) > 0 {
			f.ServerNames = m.ServerNames
		}
		for _, s := range fillTLS(&f, tc) {
			s.Part = joinPath(where, s.Part)
			skipped = append(skipped, s)
		}
		out = append(out, f)
	}
	return out, skipped
}

// tlsSocketNames are the transport socket names of Envoy's TLS socket, by which a v2 "config"
// (untyped) is known to be a DownstreamTlsContext.
var tlsSocketNames = map[string]bool{"envoy.transport_sockets.tls": true, "tls": true, "envoy.tls": true}

// downstreamTLS returns the chain's DownstreamTlsContext, nil for a chain without TLS. An error
// comes with the path, relative to the chain, of the part that could not be read.
func downstreamTLS(fc *filterChainJSON) (*downstreamTLSJSON, string, error) {
	if ts := fc.TransportSocket; ts != nil && ts.Set {
		if ts.Err != nil {
			part, reason := pathReason("transport_socket", ts.Err)
			return nil, part, reason
		}
		sock := &ts.V
		if tcfg := sock.TypedConfig; tcfg != nil && (tcfg.URL != "" || tcfg.Msg != nil) {
			switch m := tcfg.Msg.(type) {
			case *downstreamTLSJSON:
				return m, "", nil
			case *quicDownstreamJSON:
				return m.DownstreamTLSContext, "", nil
			}
			if knownUnread[typeName(tcfg.URL)] || tcfg.Msg != nil {
				return nil, "", nil // raw_buffer, an upstream context: not downstream TLS
			}
			// A transport socket certdrift does not know (tap, a private one) may still wrap TLS:
			// report it as skipped rather than treat the chain as plaintext.
			return nil, "transport_socket.typed_config", tcfg.unknown("transport socket")
		}
		cfg := []byte(sock.Config)
		if tcfg := sock.TypedConfig; tcfg != nil && tcfg.untyped != nil {
			cfg = tcfg.untyped // typed_config without "@type": only the name says what it is
		}
		if len(cfg) > 0 && string(cfg) != "null" {
			if !tlsSocketNames[sock.Name] {
				return nil, "transport_socket", fmt.Errorf("socket %q has a config without @type: not known to be TLS or plaintext", previewN([]byte(sock.Name), 80))
			}
			var tc downstreamTLSJSON
			if err := json.Unmarshal(cfg, &tc); err != nil {
				part, reason := pathReason("transport_socket.config", err)
				return nil, part, reason
			}
			return &tc, "", nil
		}
		if tlsSocketNames[sock.Name] {
			return nil, "transport_socket", errors.New("TLS socket with no config: its certificates are not in the dump")
		}
		// A named socket with no config at all (raw_buffer by name): plaintext.
		return nil, "", nil
	}
	if len(fc.TLSContext) > 0 && string(fc.TLSContext) != "null" {
		var tc downstreamTLSJSON
		if err := json.Unmarshal(fc.TLSContext, &tc); err != nil {
			part, reason := pathReason("tls_context", err)
			return nil, part, reason
		}
		return &tc, "", nil
	}
	return nil, "", nil
}

// fillTLS fills f from a DownstreamTlsContext. Problems with the certificates and trust that f
// describes are on f (InlineCertsErr, InlineCAErr); the parts whose certificates are nowhere in
// the dump (certificate providers) are returned as skipped, paths relative to the chain.
func fillTLS(f *envoystate.FilterChainTLS, tc *downstreamTLSJSON) []envoystate.ConfigSkip {
	f.RequireClientCert = tc.RequireClientCertificate != nil && *tc.RequireClientCertificate
	ctc := tc.CommonTLSContext
	if ctc == nil {
		return nil
	}
	const common = "common_tls_context"
	var (
		skipped  []envoystate.ConfigSkip
		certErrs []error
	)
	for i := range ctc.TLSCertificates {
		c := &ctc.TLSCertificates[i]
		path := fmt.Sprintf("%s.tls_certificates[%d]", common, i)
		if c.Err != nil {
			f.CertFiles = append(f.CertFiles, "<inline>")
			certErrs = append(certErrs, c.at(path))
			continue
		}
		chain := c.V.CertificateChain
		if chain == nil || !chain.Set {
			f.CertFiles = append(f.CertFiles, "<inline>")
			certErrs = append(certErrs, fmt.Errorf("%s.certificate_chain: missing", path))
			continue
		}
		certs, file, err := readCerts(chain, path+".certificate_chain")
		if file != "" {
			f.CertFiles = append(f.CertFiles, file)
			continue
		}
		f.CertFiles = append(f.CertFiles, "<inline>")
		f.InlineCerts = append(f.InlineCerts, certs...)
		if err != nil {
			certErrs = append(certErrs, err)
		}
	}
	f.InlineCertsErr = errors.Join(certErrs...)
	for i := range ctc.TLSCertificateSDSSecretConfigs {
		s := &ctc.TLSCertificateSDSSecretConfigs[i]
		f.SDSCertNames = append(f.SDSCertNames, s.Name)
		if src, ok := sdsSource(s); ok {
			f.SDSCertSources = append(f.SDSCertSources, src)
		}
	}
	provider := func(set present, field string) {
		if set {
			skipped = append(skipped, envoystate.ConfigSkip{Part: common + "." + field,
				Reason: "certificates from a certificate provider, which the admin API does not show"})
		}
	}
	provider(ctc.TLSCertificateProviderInstance, "tls_certificate_provider_instance")
	provider(ctc.TLSCertificateCertificateProvider, "tls_certificate_certificate_provider")
	provider(ctc.TLSCertificateCertificateProviderInstance, "tls_certificate_certificate_provider_instance")
	provider(ctc.ValidationContextCertificateProvider, "validation_context_certificate_provider")
	provider(ctc.ValidationContextCertificateProviderInstance, "validation_context_certificate_provider_instance")

	vc, vcPath := ctc.ValidationContext, common+".validation_context"
	vs := ctc.ValidationContextSDSSecretConfig
	if cv := ctc.CombinedValidationContext; cv != nil {
		vc, vcPath = cv.DefaultValidationContext, common+".combined_validation_context.default_validation_context"
		vs = cv.ValidationContextSDSSecretConfig
		provider(cv.ValidationContextCertificateProvider, "combined_validation_context.validation_context_certificate_provider")
		provider(cv.ValidationContextCertificateProviderInstance, "combined_validation_context.validation_context_certificate_provider_instance")
	}
	if vs != nil {
		f.SDSValidationName = vs.Name
		if src, ok := sdsSource(vs); ok {
			f.SDSValidationSource = &src
		}
	}
	if vc != nil && vc.Set {
		if vc.Err != nil {
			f.InlineCAErr = vc.at(vcPath)
		} else {
			v := readValidation(&vc.V, vcPath)
			f.CAFile, f.InlineCA, f.InlineCAErr, f.CAWatchedDir, f.SPIFFEBundles = v.file, v.ca, v.err, v.watchedDir, v.spiffe
		}
	}
	return skipped
}

// sdsSource is the file-based config source of an SDS secret config; false for ADS, API and
// static (no sds_config) secrets.
func sdsSource(s *sdsSecretConfigJSON) (envoystate.SDSSource, bool) {
	src := envoystate.SDSSource{Name: s.Name}
	if cs := s.SDSConfig; cs != nil {
		if pcs := cs.PathConfigSource; pcs != nil {
			src.Path = pcs.Path
			if pcs.WatchedDirectory != nil {
				src.WatchedDir = pcs.WatchedDirectory.Path
			}
		} else {
			src.Path = cs.Path
		}
	}
	return src, src.Path != "" || src.WatchedDir != ""
}
