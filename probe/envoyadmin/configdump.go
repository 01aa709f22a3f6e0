package envoyadmin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// configDump is what certdrift reads from one /config_dump body.
type configDump struct {
	Secrets   []Secret
	Listeners []FilterChainTLS
	// Skipped names entries that were not read: unknown types, entries that did not decode.
	Skipped []string
}

// Type names of /config_dump entries. A plain or ?mask= dump holds whole *ConfigDump messages; a
// ?resource= dump holds one entry per resource (e.g. SecretsConfigDump.DynamicSecret).
const (
	tSecretsDump     = "envoy.admin.v3.SecretsConfigDump"
	tListenersDump   = "envoy.admin.v3.ListenersConfigDump"
	tStaticSecret    = tSecretsDump + ".StaticSecret"
	tDynamicSecret   = tSecretsDump + ".DynamicSecret"
	tStaticListener  = tListenersDump + ".StaticListener"
	tDynamicListener = tListenersDump + ".DynamicListener"
)

// ignoredDumps are config_dump entries certdrift knows and does not need; they are neither read
// nor reported as skipped.
var ignoredDumps = map[string]bool{
	"envoy.admin.v3.BootstrapConfigDump":         true,
	"envoy.admin.v3.ClustersConfigDump":          true,
	"envoy.admin.v3.RoutesConfigDump":            true,
	"envoy.admin.v3.ScopedRoutesConfigDump":      true,
	"envoy.admin.v3.EndpointsConfigDump":         true,
	"envoy.admin.v3.EcdsConfigDump":              true,
	"envoy.admin.v2alpha.BootstrapConfigDump":    true,
	"envoy.admin.v2alpha.ClustersConfigDump":     true,
	"envoy.admin.v2alpha.RoutesConfigDump":       true,
	"envoy.admin.v2alpha.ScopedRoutesConfigDump": true,
}

// ParseConfigDump decodes the body of GET /config_dump (plain, ?mask= or ?resource= form) and
// returns its secrets and the downstream TLS contexts of its listeners. Entries that cannot be
// read (extensions unknown to certdrift, malformed entries) are skipped, so the error is
// non-nil only when the body as a whole is not a config dump; see ParseConfigDumpDetail for what
// was skipped.
func ParseConfigDump(data []byte) ([]Secret, []FilterChainTLS, error) {
	d, err := parseConfigDump(data, SecretActive)
	return d.Secrets, d.Listeners, err
}

// ParseConfigDumpDetail is ParseConfigDump that also names the entries it skipped.
func ParseConfigDumpDetail(data []byte) (secrets []Secret, listeners []FilterChainTLS, skipped []string, err error) {
	d, err := parseConfigDump(data, SecretActive)
	return d.Secrets, d.Listeners, d.Skipped, err
}

// parseConfigDump does the work. dynamicState is the state given to bare DynamicSecret entries
// (the ?resource= form), whose list is known only from the request.
func parseConfigDump(data []byte, dynamicState SecretState) (configDump, error) {
	var d configDump
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return d, errors.New("parse /config_dump: empty body")
	}
	if data[0] != '{' {
		return d, fmt.Errorf("parse /config_dump: expected a JSON object, body starts with %q", preview(data))
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return d, jsonErr("parse /config_dump", err)
	}
	raw, ok := top["configs"]
	// After the whole body was checked above, so syntax error offsets are the body's own.
	raw = snakeKeys(raw)
	if !ok {
		if len(top) == 0 {
			return d, nil // "{}": ?resource= with nothing of that kind
		}
		return d, fmt.Errorf("parse /config_dump: unexpected JSON shape: no \"configs\" field (has %s)", keys(top))
	}
	var configs []json.RawMessage
	if err := json.Unmarshal(raw, &configs); err != nil {
		return d, jsonErr("parse /config_dump: configs", err)
	}
	for i, c := range configs {
		d.entry(fmt.Sprintf("configs[%d]", i), c, dynamicState)
	}
	return d, nil
}

// entry reads one element of "configs". Every failure is recorded in Skipped, never fatal: one odd
// entry must not hide the rest of the dump.
func (d *configDump) entry(where string, raw json.RawMessage, dynamicState SecretState) {
	url, err := peekType(raw)
	if err != nil {
		d.skip(where, "not an object with @type", err)
		return
	}
	name := typeName(url)
	switch {
	case name == tSecretsDump:
		d.secretsDump(where, raw)
	case name == tListenersDump:
		d.listenersDump(where, raw)
	case name == tStaticSecret:
		var s staticSecretJSON
		if err := decodeJSON(raw, &s); err != nil {
			d.skip(where, url, err)
			return
		}
		d.addSecret(where, SecretStatic, s.Name, "", s.LastUpdated.Time, s.Secret)
	case name == tDynamicSecret:
		var s dynamicSecretJSON
		if err := decodeJSON(raw, &s); err != nil {
			d.skip(where, url, err)
			return
		}
		d.addSecret(where, dynamicState, s.Name, s.VersionInfo, s.LastUpdated.Time, s.Secret)
	case name == tStaticListener:
		d.staticListener(where, raw)
	case name == tDynamicListener:
		d.dynamicListener(where, raw)
	case ignoredDumps[name]:
	default:
		d.skip(where, url, errUnknownType)
	}
}

func (d *configDump) skip(where, what string, err error) {
	d.Skipped = append(d.Skipped, fmt.Sprintf("%s (%s): %v", where, previewN([]byte(what), 160), err))
}

// secretsDump splits a SecretsConfigDump into its entries so that each decodes on its own.
func (d *configDump) secretsDump(where string, raw json.RawMessage) {
	var lists struct {
		Static  []json.RawMessage `json:"static_secrets"`
		Active  []json.RawMessage `json:"dynamic_active_secrets"`
		Warming []json.RawMessage `json:"dynamic_warming_secrets"`
	}
	if err := json.Unmarshal(raw, &lists); err != nil {
		d.skip(where, tSecretsDump, jsonErr("secrets", err))
		return
	}
	for i, e := range lists.Static {
		w := fmt.Sprintf("%s.static_secrets[%d]", where, i)
		var s staticSecretJSON
		if err := decodeJSON(e, &s); err != nil {
			d.skip(w, tStaticSecret, err)
			continue
		}
		d.addSecret(w, SecretStatic, s.Name, "", s.LastUpdated.Time, s.Secret)
	}
	for _, l := range []struct {
		field   string
		state   SecretState
		entries []json.RawMessage
	}{
		{"dynamic_active_secrets", SecretActive, lists.Active},
		{"dynamic_warming_secrets", SecretWarming, lists.Warming},
	} {
		for i, e := range l.entries {
			w := fmt.Sprintf("%s.%s[%d]", where, l.field, i)
			var s dynamicSecretJSON
			if err := decodeJSON(e, &s); err != nil {
				d.skip(w, tDynamicSecret, err)
				continue
			}
			d.addSecret(w, l.state, s.Name, s.VersionInfo, s.LastUpdated.Time, s.Secret)
		}
	}
}

// listenersDump splits a ListenersConfigDump into its entries.
func (d *configDump) listenersDump(where string, raw json.RawMessage) {
	var lists struct {
		Static  []json.RawMessage `json:"static_listeners"`
		Dynamic []json.RawMessage `json:"dynamic_listeners"`
	}
	if err := json.Unmarshal(raw, &lists); err != nil {
		d.skip(where, tListenersDump, jsonErr("listeners", err))
		return
	}
	for i, e := range lists.Static {
		d.staticListener(fmt.Sprintf("%s.static_listeners[%d]", where, i), e)
	}
	for i, e := range lists.Dynamic {
		d.dynamicListener(fmt.Sprintf("%s.dynamic_listeners[%d]", where, i), e)
	}
}
