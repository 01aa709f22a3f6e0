package envoyadmin

import "encoding/json"

// The parts of Envoy's admin messages that certdrift reads, as Envoy prints them (proto3 JSON with
// proto field names; snakeKeys folds the lowerCamelCase spelling into these). Each struct names
// only the fields some parser here uses: everything else in a message is skipped unread, as
// protojson's DiscardUnknown would. Field comments give the proto message each struct stands for.

// Type names of the Any payloads certdrift reads or recognises (v3; legacyTypes maps v2).
const (
	tSecret         = "envoy.extensions.transport_sockets.tls.v3.Secret"
	tGenericSecret  = "envoy.extensions.transport_sockets.tls.v3.GenericSecret"
	tListener       = "envoy.config.listener.v3.Listener"
	tDownstreamTLS  = "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
	tUpstreamTLS    = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
	tQUICDownstream = "envoy.extensions.transport_sockets.quic.v3.QuicDownstreamTransport"
	tQUICUpstream   = "envoy.extensions.transport_sockets.quic.v3.QuicUpstreamTransport"
	tSPIFFE         = "envoy.extensions.transport_sockets.tls.v3.SPIFFECertValidatorConfig"
	tRawBuffer      = "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"
)

// certificateJSON is envoy.admin.v3.Certificate, one entry of /certs.
type certificateJSON struct {
	CACert    []certDetailsJSON `json:"ca_cert"`
	CertChain []certDetailsJSON `json:"cert_chain"`
}

// certDetailsJSON is envoy.admin.v3.CertificateDetails.
// Every field is caught: a bad value is an error on its CertDetail, the other fields still read.
type certDetailsJSON struct {
	Path                caught[string]    `json:"path"`
	SerialNumber        caught[string]    `json:"serial_number"`
	SubjectAltNames     caught[[]sanJSON] `json:"subject_alt_names"`
	DaysUntilExpiration caught[pbUint]    `json:"days_until_expiration"`
	ValidFrom           caught[pbTime]    `json:"valid_from"`
	ExpirationTime      caught[pbTime]    `json:"expiration_time"`
}

// sanJSON is envoy.admin.v3.SubjectAlternateName (a oneof).
type sanJSON struct {
	DNS       *string `json:"dns"`
	URI       *string `json:"uri"`
	IPAddress *string `json:"ip_address"`
}

// secretEntryJSON is envoy.admin.v3.SecretsConfigDump.DynamicSecret, and StaticSecret (which has
// no version_info). The timestamp and the payload are caught so that a bad one is reported with
// the secret rather than losing its name.
type secretEntryJSON struct {
	Name        string           `json:"name"`
	VersionInfo string           `json:"version_info"`
	LastUpdated caught[pbTime]   `json:"last_updated"`
	Secret      *caught[anyJSON] `json:"secret"`
}

// staticListenerJSON is envoy.admin.v3.ListenersConfigDump.StaticListener.
type staticListenerJSON struct {
	Listener *anyJSON `json:"listener"`
}

// dynamicListenerJSON is envoy.admin.v3.ListenersConfigDump.DynamicListener.
type dynamicListenerJSON struct {
	Name          string             `json:"name"`
	ActiveState   *listenerStateJSON `json:"active_state"`
	WarmingState  *listenerStateJSON `json:"warming_state"`
	DrainingState *listenerStateJSON `json:"draining_state"`
}

// listenerStateJSON is envoy.admin.v3.ListenersConfigDump.DynamicListenerState.
type listenerStateJSON struct {
	Listener *anyJSON `json:"listener"`
}

// listenerJSON is envoy.config.listener.v3.Listener.
type listenerJSON struct {
	Name               string            `json:"name"`
	Address            *addressJSON      `json:"address"`
	FilterChains       []filterChainJSON `json:"filter_chains"`
	DefaultFilterChain *filterChainJSON  `json:"default_filter_chain"`
}

// addressJSON is envoy.config.core.v3.Address (socket_address and pipe of its oneof).
type addressJSON struct {
	SocketAddress *struct {
		Address   string `json:"address"`
		PortValue pbUint `json:"port_value"`
	} `json:"socket_address"`
	Pipe *struct {
		Path string `json:"path"`
	} `json:"pipe"`
}

// filterChainJSON is envoy.config.listener.v3.FilterChain, plus the v2 tls_context that v3
// dropped. tls_context is decoded only when the chain has no transport socket, and then on its
// own, so that a bad one costs only its chain (as when v3 decoding discarded it as unknown).
// The transport socket is caught so that a malformed one costs only its chain, not the listener.
type filterChainJSON struct {
	Name             string `json:"name"`
	FilterChainMatch *struct {
		ServerNames []string `json:"server_names"`
	} `json:"filter_chain_match"`
	TransportSocket *caught[transportSocketJSON] `json:"transport_socket"`
	TLSContext      json.RawMessage              `json:"tls_context"`
}

// transportSocketJSON is envoy.config.core.v3.TransportSocket, plus the v2 "config" (a Struct:
// the message without "@type") that v3 dropped; it is decoded, by name, only when there is no
// typed_config.
type transportSocketJSON struct {
	Name        string          `json:"name"`
	TypedConfig *anyJSON        `json:"typed_config"`
	Config      json.RawMessage `json:"config"`
}

// downstreamTLSJSON is envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext.
type downstreamTLSJSON struct {
	CommonTLSContext *commonTLSJSON `json:"common_tls_context"`
	// A google.protobuf.BoolValue: a plain JSON bool.
	RequireClientCertificate *bool `json:"require_client_certificate"`
}

// quicDownstreamJSON is envoy.extensions.transport_sockets.quic.v3.QuicDownstreamTransport.
type quicDownstreamJSON struct {
	DownstreamTLSContext *downstreamTLSJSON `json:"downstream_tls_context"`
}

// commonTLSJSON is envoy.extensions.transport_sockets.tls.v3.CommonTlsContext.
// Certificates and validation contexts are caught so that a bad one is an error on its
// FilterChainTLS. Certificate providers (CertificateProviderPluginInstance and the deprecated
// forms) are only noted: their certificates are not in the dump, which certdrift must say.
type commonTLSJSON struct {
	TLSCertificates                  []caught[tlsCertificateJSON] `json:"tls_certificates"`
	TLSCertificateSDSSecretConfigs   []sdsSecretConfigJSON        `json:"tls_certificate_sds_secret_configs"`
	ValidationContext                *caught[validationJSON]      `json:"validation_context"`
	ValidationContextSDSSecretConfig *sdsSecretConfigJSON         `json:"validation_context_sds_secret_config"`
	CombinedValidationContext        *struct {
		DefaultValidationContext                     *caught[validationJSON] `json:"default_validation_context"`
		ValidationContextSDSSecretConfig             *sdsSecretConfigJSON    `json:"validation_context_sds_secret_config"`
		ValidationContextCertificateProvider         present                 `json:"validation_context_certificate_provider"`
		ValidationContextCertificateProviderInstance present                 `json:"validation_context_certificate_provider_instance"`
	} `json:"combined_validation_context"`
	TLSCertificateProviderInstance               present `json:"tls_certificate_provider_instance"`
	TLSCertificateCertificateProvider            present `json:"tls_certificate_certificate_provider"`
	TLSCertificateCertificateProviderInstance    present `json:"tls_certificate_certificate_provider_instance"`
	ValidationContextCertificateProvider         present `json:"validation_context_certificate_provider"`
	ValidationContextCertificateProviderInstance present `json:"validation_context_certificate_provider_instance"`
}

// sdsSecretConfigJSON is envoy.extensions.transport_sockets.tls.v3.SdsSecretConfig.
type sdsSecretConfigJSON struct {
	Name      string `json:"name"`
	SDSConfig *struct {
		// The deprecated string form, still accepted by Envoy and found in old dumps.
		Path             string `json:"path"`
		PathConfigSource *struct {
			Path             string                `json:"path"`
			WatchedDirectory *watchedDirectoryJSON `json:"watched_directory"`
		} `json:"path_config_source"`
	} `json:"sds_config"`
}

// watchedDirectoryJSON is envoy.config.core.v3.WatchedDirectory.
type watchedDirectoryJSON struct {
	Path string `json:"path"`
}

// secretJSON is envoy.extensions.transport_sockets.tls.v3.Secret. generic_secret and
// session_ticket_keys are deliberately absent: they are never decoded, so their contents cannot
// reach a result or an error.
// Its parts are caught: a malformed certificate is the Secret's ChainErr, a malformed validation
// context its ValidationCAErr, and the Secret is still reported.
type secretJSON struct {
	Name              string                      `json:"name"`
	TLSCertificate    *caught[tlsCertificateJSON] `json:"tls_certificate"`
	ValidationContext *caught[validationJSON]     `json:"validation_context"`
}

// tlsCertificateJSON is envoy.extensions.transport_sockets.tls.v3.TlsCertificate.
type tlsCertificateJSON struct {
	CertificateChain *caught[dataSourceJSON] `json:"certificate_chain"`
	// The key is caught so that a malformed one does not cost the certificate; its error is never
	// reported, lest it describe key material.
	PrivateKey       *caught[dataSourceJSON] `json:"private_key"`
	Pkcs12           *caught[dataSourceJSON] `json:"pkcs12"`
	WatchedDirectory *watchedDirectoryJSON   `json:"watched_directory"`
}

// validationJSON is envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext.
type validationJSON struct {
	TrustedCA             *caught[dataSourceJSON] `json:"trusted_ca"`
	WatchedDirectory      *watchedDirectoryJSON   `json:"watched_directory"`
	CustomValidatorConfig *struct {
		Name        string   `json:"name"`
		TypedConfig *anyJSON `json:"typed_config"`
	} `json:"custom_validator_config"`
	CACertificateProviderInstance present `json:"ca_certificate_provider_instance"`
}

// spiffeJSON is envoy.extensions.transport_sockets.tls.v3.SPIFFECertValidatorConfig.
type spiffeJSON struct {
	TrustDomains []struct {
		Name        string                  `json:"name"`
		TrustBundle *caught[dataSourceJSON] `json:"trust_bundle"`
	} `json:"trust_domains"`
}

// dataSourceJSON is envoy.config.core.v3.DataSource (a oneof; environment_variable is noted by
// name, its value is not in the dump). The DataSource of a private key is decoded like any other,
// and only ever compared with "[redacted]": its bytes are never kept.
type dataSourceJSON struct {
	Filename            string                `json:"filename"`
	InlineBytes         *pbBytes              `json:"inline_bytes"`
	InlineString        *string               `json:"inline_string"`
	EnvironmentVariable string                `json:"environment_variable"`
	WatchedDirectory    *watchedDirectoryJSON `json:"watched_directory"`
}
