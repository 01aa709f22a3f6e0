package envoyadmin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
)

func (d *configDump) staticListener(where string, raw json.RawMessage) {
	var sl staticListenerJSON
	if err := decodeJSON(raw, &sl); err != nil {
		d.skip(where, tStaticListener, err)
		return
	}
	d.listener(where, "static", sl.Listener)
}

func (d *configDump) dynamicListener(where string, raw json.RawMessage) {
	var dl dynamicListenerJSON
	if err := decodeJSON(raw, &dl); err != nil {
		d.skip(where, tDynamicListener, err)
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
			d.listener(where+"."+st.field, st.state, st.s.Listener)
		}
	}
}

// listener reads one Listener Any.
func (d *configDump) listener(where, state string, a *anyJSON) {
	l, ok := a.msg().(*listenerJSON)
	if !ok {
		d.skip(where, a.url(), a.unknown("listener.v3.Listener"))
		return
	}
	fcs, skipped := filterChains(l, state)
	d.Listeners = append(d.Listeners, fcs...)
	for _, s := range skipped {
		d.Skipped = append(d.Skipped, where+"."+s)
	}
}

// ParseListenerJSON reads the downstream TLS contexts of one xDS Listener in protojson form (as
// a control plane such as Envoy Gateway emits it, in either field-name style). It is for xDS
// output; admin /config_dump bodies go to ParseConfigDump.
func ParseListenerJSON(data []byte) ([]FilterChainTLS, error) {
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

// filterChains returns one FilterChainTLS per filter chain that terminates TLS, and the chains
// whose transport socket could not be read.
func filterChains(l *listenerJSON, state string) ([]FilterChainTLS, []string) {
	var (
		out     []FilterChainTLS
		skipped []string
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
		tc, err := downstreamTLS(fc)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("filter_chains[%d] (%s): %v", i, preview([]byte(fc.Name)), err))
			continue
		}
		if tc == nil {
			continue // plaintext chain
		}
		f := FilterChainTLS{
			Listener:    l.Name,
			State:       state,
			Address:     addr,
			FilterChain: fc.Name,
		}
		if m := fc.FilterChainMatch; m != nil && len(m.ServerNames) > 0 {
			f.ServerNames = m.ServerNames
		}
		fillTLS(&f, tc)
		out = append(out, f)
	}
	return out, skipped
}

// downstreamTLS returns the chain's DownstreamTlsContext, nil for a chain without TLS.
func downstreamTLS(fc *filterChainJSON) (*downstreamTLSJSON, error) {
	if ts := fc.TransportSocket; ts != nil && ts.TypedConfig != nil {
		switch m := ts.TypedConfig.Msg.(type) {
		case *downstreamTLSJSON:
			return m, nil
		case *quicDownstreamJSON:
			return m.DownstreamTLSContext, nil
		}
		if knownUnread[typeName(ts.TypedConfig.URL)] || ts.TypedConfig.Msg != nil {
			return nil, nil // raw_buffer, an upstream context: not downstream TLS
		}
		// A transport socket certdrift does not know (tap, a private one) may still wrap TLS:
		// report it as skipped rather than treat the chain as plaintext.
		return nil, ts.TypedConfig.unknown("transport socket")
	}
	if len(fc.TLSContext) > 0 && string(fc.TLSContext) != "null" {
		var tc downstreamTLSJSON
		if err := decodeJSON(fc.TLSContext, &tc); err != nil {
			return nil, fmt.Errorf("tls_context: %w", err)
		}
		return &tc, nil
	}
	return nil, nil
}

func fillTLS(f *FilterChainTLS, tc *downstreamTLSJSON) {
	f.RequireClientCert = tc.RequireClientCertificate != nil && *tc.RequireClientCertificate
	ctc := tc.CommonTLSContext
	if ctc == nil {
		return
	}
	for _, c := range ctc.TLSCertificates {
		chain := c.CertificateChain
		if b, ok := inlineData(chain); ok {
			f.CertFiles = append(f.CertFiles, "<inline>")
			if certs, err := parseInline(b, "certificate_chain"); err == nil {
				f.InlineCerts = append(f.InlineCerts, certs...)
			}
			continue
		}
		if chain != nil && chain.Filename != "" {
			f.CertFiles = append(f.CertFiles, chain.Filename)
		}
	}
	for i := range ctc.TLSCertificateSDSSecretConfigs {
		s := &ctc.TLSCertificateSDSSecretConfigs[i]
		f.SDSCertNames = append(f.SDSCertNames, s.Name)
		if src, ok := sdsSource(s); ok {
			f.SDSCertSources = append(f.SDSCertSources, src)
		}
	}
	vc := ctc.ValidationContext
	vs := ctc.ValidationContextSDSSecretConfig
	if cv := ctc.CombinedValidationContext; cv != nil {
		vc = cv.DefaultValidationContext
		vs = cv.ValidationContextSDSSecretConfig
	}
	if vs != nil {
		f.SDSValidationName = vs.Name
		if src, ok := sdsSource(vs); ok {
			f.SDSValidationSource = &src
		}
	}
	if vc != nil && vc.TrustedCA != nil {
		f.CAFile = vc.TrustedCA.Filename
	}
}

// sdsSource is the file-based config source of an SDS secret config; false for ADS, API and
// static (no sds_config) secrets.
func sdsSource(s *sdsSecretConfigJSON) (SDSSource, bool) {
	src := SDSSource{Name: s.Name}
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
