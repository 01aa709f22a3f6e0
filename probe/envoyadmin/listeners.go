package envoyadmin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	quicv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/quic/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

func (d *configDump) staticListener(where string, raw json.RawMessage) {
	var sl adminv3.ListenersConfigDump_StaticListener
	if err := decodeProto(raw, &sl); err != nil {
		d.skip(where, tStaticListener, err)
		return
	}
	var legacy struct {
		Listener json.RawMessage `json:"listener"`
	}
	_ = json.Unmarshal(raw, &legacy) // already decoded above; only the legacy field is wanted
	d.listener(where, "static", sl.GetListener(), legacy.Listener)
}

func (d *configDump) dynamicListener(where string, raw json.RawMessage) {
	var dl adminv3.ListenersConfigDump_DynamicListener
	if err := decodeProto(raw, &dl); err != nil {
		d.skip(where, tDynamicListener, err)
		return
	}
	var legacy map[string]struct {
		Listener json.RawMessage `json:"listener"`
	}
	_ = json.Unmarshal(raw, &legacy)
	for _, st := range []struct {
		field, state string
		s            *adminv3.ListenersConfigDump_DynamicListenerState
	}{
		{"active_state", "active", dl.GetActiveState()},
		{"warming_state", "warming", dl.GetWarmingState()},
		{"draining_state", "draining", dl.GetDrainingState()},
	} {
		if st.s != nil {
			d.listener(where+"."+st.field, st.state, st.s.GetListener(), legacy[st.field].Listener)
		}
	}
}

// listener unpacks one Listener Any. rawListener is its JSON, read again only for the v2
// FilterChain.tls_context field that v3 dropped (old Envoys' dumps still carry it).
func (d *configDump) listener(where, state string, a *anypb.Any, rawListener json.RawMessage) {
	m, err := unpack(a)
	if err != nil {
		d.skip(where, a.GetTypeUrl(), err)
		return
	}
	l, ok := m.(*listenerv3.Listener)
	if !ok {
		d.skip(where, a.GetTypeUrl(), errors.New("not a listener.v3.Listener"))
		return
	}
	fcs, skipped := filterChains(l, state, legacyTLSContexts(rawListener))
	d.Listeners = append(d.Listeners, fcs...)
	for _, s := range skipped {
		d.Skipped = append(d.Skipped, where+"."+s)
	}
}

// ParseListenerJSON reads the downstream TLS contexts of one xDS Listener in protojson form (as
// a control plane such as Envoy Gateway emits it, in either field-name style). It is for xDS
// output; admin /config_dump bodies go to ParseConfigDump.
func ParseListenerJSON(data []byte) ([]FilterChainTLS, error) {
	var l listenerv3.Listener
	if err := decodeProto(bytes.TrimSpace(data), &l); err != nil {
		return nil, fmt.Errorf("parse listener: %w", err)
	}
	fcs, skipped := filterChains(&l, "", legacyTLSContexts(data))
	if len(skipped) > 0 {
		return fcs, fmt.Errorf("parse listener %q: skipped %v", l.GetName(), skipped)
	}
	return fcs, nil
}

// legacyTLSContexts returns the v2 tls_context of each filter chain, by index (nil where absent).
func legacyTLSContexts(rawListener json.RawMessage) []json.RawMessage {
	if len(rawListener) == 0 {
		return nil
	}
	var l struct {
		FilterChains []struct {
			TLSContext json.RawMessage `json:"tls_context"`
		} `json:"filter_chains"`
	}
	if json.Unmarshal(rawListener, &l) != nil {
		return nil
	}
	out := make([]json.RawMessage, len(l.FilterChains))
	for i, fc := range l.FilterChains {
		out[i] = fc.TLSContext
	}
	return out
}

// filterChains returns one FilterChainTLS per filter chain that terminates TLS, and the chains
// whose transport socket could not be read.
func filterChains(l *listenerv3.Listener, state string, legacy []json.RawMessage) ([]FilterChainTLS, []string) {
	var (
		out     []FilterChainTLS
		skipped []string
	)
	addr := ""
	if sa := l.GetAddress().GetSocketAddress(); sa != nil {
		addr = net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))
	} else if p := l.GetAddress().GetPipe(); p != nil {
		addr = p.GetPath()
	}
	chains := l.GetFilterChains()
	if dc := l.GetDefaultFilterChain(); dc != nil {
		chains = append(chains[:len(chains):len(chains)], dc)
	}
	for i, fc := range chains {
		var legacyRaw json.RawMessage
		if i < len(legacy) && len(legacy[i]) > 0 && string(legacy[i]) != "null" {
			legacyRaw = legacy[i]
		}
		tc, err := downstreamTLS(fc, legacyRaw)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("filter_chains[%d] (%s): %v", i, preview([]byte(fc.GetName())), err))
			continue
		}
		if tc == nil {
			continue // plaintext chain
		}
		f := FilterChainTLS{
			Listener:    l.GetName(),
			State:       state,
			Address:     addr,
			FilterChain: fc.GetName(),
			ServerNames: fc.GetFilterChainMatch().GetServerNames(),
		}
		fillTLS(&f, tc)
		out = append(out, f)
	}
	return out, skipped
}

const rawBuffer = "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"

// downstreamTLS returns the chain's DownstreamTlsContext, nil for a chain without TLS.
func downstreamTLS(fc *listenerv3.FilterChain, legacyRaw json.RawMessage) (*tlsv3.DownstreamTlsContext, error) {
	if ts := fc.GetTransportSocket(); ts.GetTypedConfig() != nil {
		if typeName(ts.GetTypedConfig().GetTypeUrl()) == rawBuffer {
			return nil, nil
		}
		m, err := unpack(ts.GetTypedConfig())
		if err != nil {
			// A transport socket certdrift does not know (tap, a private one) may still wrap
			// TLS: report it as skipped rather than treat the chain as plaintext.
			return nil, err
		}
		switch m := m.(type) {
		case *tlsv3.DownstreamTlsContext:
			return m, nil
		case *quicv3.QuicDownstreamTransport:
			return m.GetDownstreamTlsContext(), nil
		}
		return nil, nil
	}
	if legacyRaw != nil {
		var tc tlsv3.DownstreamTlsContext
		if err := decodeProto(legacyRaw, &tc); err != nil {
			return nil, fmt.Errorf("tls_context: %w", err)
		}
		return &tc, nil
	}
	return nil, nil
}

func fillTLS(f *FilterChainTLS, tc *tlsv3.DownstreamTlsContext) {
	f.RequireClientCert = tc.GetRequireClientCertificate().GetValue()
	ctc := tc.GetCommonTlsContext()
	for _, c := range ctc.GetTlsCertificates() {
		chain := c.GetCertificateChain()
		if b, ok := inlineData(chain); ok {
			f.CertFiles = append(f.CertFiles, "<inline>")
			if certs, err := parseInline(b, "certificate_chain"); err == nil {
				f.InlineCerts = append(f.InlineCerts, certs...)
			}
			continue
		}
		if fn := chain.GetFilename(); fn != "" {
			f.CertFiles = append(f.CertFiles, fn)
		}
	}
	for _, s := range ctc.GetTlsCertificateSdsSecretConfigs() {
		f.SDSCertNames = append(f.SDSCertNames, s.GetName())
		if src, ok := sdsSource(s); ok {
			f.SDSCertSources = append(f.SDSCertSources, src)
		}
	}
	vc := ctc.GetValidationContext()
	vs := ctc.GetValidationContextSdsSecretConfig()
	if cv := ctc.GetCombinedValidationContext(); cv != nil {
		vc = cv.GetDefaultValidationContext()
		vs = cv.GetValidationContextSdsSecretConfig()
	}
	if vs != nil {
		f.SDSValidationName = vs.GetName()
		if src, ok := sdsSource(vs); ok {
			f.SDSValidationSource = &src
		}
	}
	f.CAFile = vc.GetTrustedCa().GetFilename()
}

// sdsSource is the file-based config source of an SDS secret config; false for ADS, API and
// static (no sds_config) secrets.
func sdsSource(s *tlsv3.SdsSecretConfig) (SDSSource, bool) {
	cs := s.GetSdsConfig()
	src := SDSSource{Name: s.GetName()}
	if pcs := cs.GetPathConfigSource(); pcs != nil {
		src.Path = pcs.GetPath()
		src.WatchedDir = pcs.GetWatchedDirectory().GetPath()
	} else {
		//nolint:staticcheck // the deprecated string form is still accepted by Envoy and in old dumps
		src.Path = cs.GetPath()
	}
	return src, src.Path != "" || src.WatchedDir != ""
}
