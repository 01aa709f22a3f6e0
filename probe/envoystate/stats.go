package envoystate

import (
	"strings"
	"time"
)

// Stats name sanitising: Envoy replaces "://", ":/" and ":" with "_" in the secret name of
// "sds.<name>.*" stats (so "kubernetes://ns/foo" becomes "kubernetes_ns/foo"), but not in
// "ssl.certificate.<name>.*" gauges.
var statNameReplacer = strings.NewReplacer("://", "_", ":/", "_", ":", "_", "\x00", "_")

// SanitizeStatName returns the form a secret name takes inside an sds.<name>.* stat, so that
// callers can match KeyRotationFailed and SDSUpdates keys to config_dump secret names.
func SanitizeStatName(secretName string) string {
	return statNameReplacer.Replace(secretName)
}

// withSuffix collects stats named prefix+<key>+suffix, keyed by <key>. Keys may hold dots and
// colons (secret names), which is why the name is cut at both ends and never split on dots.
func (s Stats) withSuffix(prefix, suffix string) map[string]uint64 {
	out := map[string]uint64{}
	for name, v := range s.Counters {
		if len(name) > len(prefix)+len(suffix) && strings.HasPrefix(name, prefix) && strings.HasSuffix(name, suffix) {
			out[name[len(prefix):len(name)-len(suffix)]] = v
		}
	}
	return out
}

// KeyRotationFailed maps the (sanitised, see SanitizeStatName) SDS secret name to the
// sds.<name>.key_rotation_failed counter: file-based SDS secrets whose watched files changed but
// could not be loaded.
func (s Stats) KeyRotationFailed() map[string]uint64 {
	return s.withSuffix("sds.", ".key_rotation_failed")
}

// SDSUpdate is the update counters of one SDS secret subscription.
type SDSUpdate struct {
	Success, Rejected, Failure uint64
	// LastUpdate is from the update_time gauge (milliseconds since the epoch); zero if absent.
	LastUpdate time.Time
}

// SDSUpdates returns the update counters by (sanitised) secret name.
func (s Stats) SDSUpdates() map[string]SDSUpdate {
	out := map[string]SDSUpdate{}
	set := func(suffix string, f func(*SDSUpdate, uint64)) {
		for name, v := range s.withSuffix("sds.", suffix) {
			u := out[name]
			f(&u, v)
			out[name] = u
		}
	}
	set(".update_success", func(u *SDSUpdate, v uint64) { u.Success = v })
	set(".update_rejected", func(u *SDSUpdate, v uint64) { u.Rejected = v })
	set(".update_failure", func(u *SDSUpdate, v uint64) { u.Failure = v })
	set(".update_time", func(u *SDSUpdate, v uint64) {
		if v > 0 && v < 1<<53 {
			u.LastUpdate = time.UnixMilli(int64(v)).UTC()
		}
	})
	return out
}

// SSLContextUpdatesBySDS maps a socket factory scope (e.g.
// "listener.0.0.0.0_443.server_ssl_socket_factory") to its ssl_context_update_by_sds counter: how
// often a secret update rebuilt that TLS context.
func (s Stats) SSLContextUpdatesBySDS() map[string]uint64 {
	return s.withSuffix("", ".ssl_context_update_by_sds")
}

// Handshakes is the TLS counters of one listener or cluster scope.
type Handshakes struct {
	Handshake, ConnectionError uint64
}

// SSLHandshakes maps a scope ("listener.0.0.0.0_443", "cluster.foo") to its ssl.handshake and
// ssl.connection_error counters.
func (s Stats) SSLHandshakes() map[string]Handshakes {
	out := map[string]Handshakes{}
	for scope, v := range s.withSuffix("", ".ssl.handshake") {
		h := out[scope]
		h.Handshake = v
		out[scope] = h
	}
	for scope, v := range s.withSuffix("", ".ssl.connection_error") {
		h := out[scope]
		h.ConnectionError = v
		out[scope] = h
	}
	return out
}

// CertExpirations maps "<scope>/<certificate name>" to the expiry in the
// <scope>.ssl.certificate.<name>.expiration_unix_time_seconds gauges of recent Envoys (seen in
// 1.36 and 1.40). The name is the SDS secret name unsanitised, or "unnamed_cert_<hash>" /
// "unnamed_ca_cert_<hash>" for inline and file certificates.
func (s Stats) CertExpirations() map[string]time.Time {
	out := map[string]time.Time{}
	const mid, suffix = ".ssl.certificate.", ".expiration_unix_time_seconds"
	for name, v := range s.Counters {
		if !strings.HasSuffix(name, suffix) {
			continue
		}
		i := strings.Index(name, mid)
		if i <= 0 || i+len(mid) >= len(name)-len(suffix) || v > 1<<40 {
			continue
		}
		out[name[:i]+"/"+name[i+len(mid):len(name)-len(suffix)]] = time.Unix(int64(v), 0).UTC()
	}
	return out
}

// noTLSContextDays are what server.days_until_first_cert_expiring reads when Envoy has no TLS
// context at all: int32 max in older Envoys, uint32 max in newer ones.
var noTLSContextDays = map[uint64]bool{2147483647: true, 4294967295: true}

// DaysUntilFirstCertExpiring returns server.days_until_first_cert_expiring; ok is false when the
// stat is absent or holds the "no TLS context" sentinel. 0 means expired or under a day.
func (s Stats) DaysUntilFirstCertExpiring() (days uint64, ok bool) {
	v, ok := s.Counters["server.days_until_first_cert_expiring"]
	if !ok || noTLSContextDays[v] {
		return 0, false
	}
	return v, true
}

// VerifyFailures is one listener's or cluster's certificate verification counters
// (<scope>.ssl.fail_verify_*): handshakes Envoy itself refused because the peer's certificate did
// not verify. On a cluster the peer is the upstream: Envoy rejected what the server presented.
type VerifyFailures struct {
	// Error is ssl.fail_verify_error: the chain did not verify against the trusted CA (unknown
	// issuer, expired, not yet valid).
	Error uint64
	// SAN, CertHash and NoCert are ssl.fail_verify_san (no subject_alt_name matched),
	// ssl.fail_verify_cert_hash (no pinned hash matched) and ssl.fail_verify_no_cert (no
	// certificate presented where one is required).
	SAN, CertHash, NoCert uint64
	// ConnectionError is ssl.connection_error (every failed TLS handshake, verification or not)
	// and ConnectFail is upstream_cx_connect_fail (clusters only).
	ConnectionError, ConnectFail uint64
}

// VerifyFailures maps a scope ("cluster.xds_cluster", "listener.0.0.0.0_443") to its verification
// counters; scopes with no ssl.fail_verify_* stat are left out.
func (s Stats) VerifyFailures() map[string]VerifyFailures {
	out := map[string]VerifyFailures{}
	for suffix, set := range map[string]func(*VerifyFailures, uint64){
		".ssl.fail_verify_error":     func(f *VerifyFailures, v uint64) { f.Error = v },
		".ssl.fail_verify_san":       func(f *VerifyFailures, v uint64) { f.SAN = v },
		".ssl.fail_verify_cert_hash": func(f *VerifyFailures, v uint64) { f.CertHash = v },
		".ssl.fail_verify_no_cert":   func(f *VerifyFailures, v uint64) { f.NoCert = v },
	} {
		for scope, v := range s.withSuffix("", suffix) {
			f := out[scope]
			set(&f, v)
			out[scope] = f
		}
	}
	for scope, f := range out {
		f.ConnectionError = s.Counters[scope+".ssl.connection_error"]
		f.ConnectFail = s.Counters[scope+".upstream_cx_connect_fail"]
		out[scope] = f
	}
	return out
}

// ControlPlaneConnected reads the control_plane.connected_state gauge: whether the Envoy's ADS
// (xDS) gRPC stream is up. ok is false when the stat is absent: Envoy 1.36 and 1.40 create it
// only when the bootstrap configures an ADS stream, so a static-config Envoy has none.
func (s Stats) ControlPlaneConnected() (connected, ok bool) {
	v, ok := s.Counters["control_plane.connected_state"]
	return v == 1, ok
}
