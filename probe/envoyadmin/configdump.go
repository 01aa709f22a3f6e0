package envoyadmin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/certdrift/certdrift/probe/envoystate"
)

// configDump is what certdrift reads from one /config_dump body.
type configDump struct {
	Secrets   []envoystate.Secret
	Listeners []envoystate.FilterChainTLS
	// Skipped are the parts that were not read and belong to no Secret or FilterChainTLS.
	Skipped []envoystate.ConfigSkip
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

// ParseConfigDump decodes the body of GET /config_dump (plain, ?mask= or ?resource= form, or a
// bare SecretsConfigDump or ListenersConfigDump such as `istioctl proxy-config secret -o json`
// prints) and returns its secrets and the downstream TLS contexts of its listeners. Entries that
// cannot be read (extensions unknown to certdrift, malformed entries) are skipped, so the error is
// non-nil only when the body as a whole is not a config dump; see ParseConfigDumpDetail for what
// was skipped.
func ParseConfigDump(data []byte) ([]envoystate.Secret, []envoystate.FilterChainTLS, error) {
	d, err := parseConfigDump(data, envoystate.SecretActive)
	return d.Secrets, d.Listeners, err
}

// ParseConfigDumpDetail is ParseConfigDump that also names the parts it skipped.
func ParseConfigDumpDetail(data []byte) (secrets []envoystate.Secret, listeners []envoystate.FilterChainTLS, skipped []envoystate.ConfigSkip, err error) {
	d, err := parseConfigDump(data, envoystate.SecretActive)
	return d.Secrets, d.Listeners, d.Skipped, err
}

// parseConfigDump does the work. dynamicState is the state given to bare DynamicSecret entries
// (the ?resource= form), whose list is known only from the request.
func parseConfigDump(data []byte, dynamicState envoystate.SecretState) (configDump, error) {
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
	if !ok {
		if len(top) == 0 {
			return d, nil // "{}": ?resource= with nothing of that kind
		}
		// A bare SecretsConfigDump or ListenersConfigDump, as istioctl prints one (in
		// lowerCamelCase) and as some tools save Envoy's.
		if kind := inferDump(top); kind != "" {
			d.entry("", kind, snakeKeys(data), dynamicState)
			return d, nil
		}
		return d, fmt.Errorf("parse /config_dump: unexpected JSON shape: no \"configs\" field (has %s)", keys(top))
	}
	// After the whole body was checked above, so syntax error offsets are the body's own.
	raw = snakeKeys(raw)
	var configs []json.RawMessage
	if err := json.Unmarshal(raw, &configs); err != nil {
		return d, jsonErr("parse /config_dump: configs", err)
	}
	for i, c := range configs {
		d.entry(fmt.Sprintf("configs[%d]", i), "", c, dynamicState)
	}
	return d, nil
}

// dumpKeys are the fields by which a config dump entry without "@type" is recognised, in either
// spelling (the bare form is checked before snakeKeys).
var dumpKeys = map[string]string{
	"static_secrets": tSecretsDump, "dynamic_active_secrets": tSecretsDump, "dynamic_warming_secrets": tSecretsDump,
	"staticSecrets": tSecretsDump, "dynamicActiveSecrets": tSecretsDump, "dynamicWarmingSecrets": tSecretsDump,
	"static_listeners": tListenersDump, "dynamic_listeners": tListenersDump,
	"staticListeners": tListenersDump, "dynamicListeners": tListenersDump,
}

// inferDump names the dump message an object without "@type" is, by its fields; "" when none fits
// or the fields name more than one.
func inferDump[V any](obj map[string]V) string {
	kind := ""
	for k := range obj {
		if t, ok := dumpKeys[k]; ok {
			if kind != "" && kind != t {
				return ""
			}
			kind = t
		}
	}
	return kind
}

// entry reads one element of "configs" (where is its path), or a whole bare dump of type kind.
// Every failure is recorded in Skipped, never fatal: one odd entry must not hide the rest of the
// dump.
func (d *configDump) entry(where, kind string, raw json.RawMessage, dynamicState envoystate.SecretState) {
	url := kind
	if url == "" {
		var err error
		if url, err = peekType(raw); err != nil {
			d.skip(where, fmt.Errorf("not an object with @type: %w", err))
			return
		}
	}
	if url == "" {
		// No "@type": tools that re-marshal a dump without its Any wrapping drop it.
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) == nil {
			url = inferDump(obj)
		}
		if url == "" && len(obj) > 0 {
			d.skip(where, errors.New("no @type, and its fields are not those of a secrets or listeners dump"))
			return
		}
		if url == "" {
			return // {}: nothing there
		}
	}
	name := typeName(url)
	switch {
	case name == tSecretsDump:
		d.secretsDump(where, raw)
	case name == tListenersDump:
		d.listenersDump(where, raw)
	case name == tStaticSecret:
		d.secretEntry(where, envoystate.SecretStatic, raw)
	case name == tDynamicSecret:
		d.secretEntry(where, dynamicState, raw)
	case name == tStaticListener:
		d.staticListener(where, raw)
	case name == tDynamicListener:
		d.dynamicListener(where, raw)
	case ignoredDumps[name]:
	default:
		d.skip(where, fmt.Errorf("%w %q", errUnknownType, previewN([]byte(url), 160)))
	}
}

func (d *configDump) skip(where string, err error) {
	d.Skipped = append(d.Skipped, envoystate.ConfigSkip{Part: where, Reason: err.Error()})
}

// skipField records err, a decode error of the value at where, with the path inside the value
// that encoding/json recorded joined to where.
func (d *configDump) skipField(where string, err error) {
	part, reason := pathReason(where, err)
	d.skip(part, reason)
}

// pathReason splits a decode error of the value at path into the path of the bad part (path plus
// the path inside the value that encoding/json recorded) and what is wrong there.
func pathReason(path string, err error) (string, error) {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return joinPath(path, te.Field), fmt.Errorf("%s where %s expected", te.Value, expected(te.Type))
	}
	return path, shapeErr(err)
}

// secretEntry reads one StaticSecret or DynamicSecret.
func (d *configDump) secretEntry(where string, state envoystate.SecretState, raw json.RawMessage) {
	var s secretEntryJSON
	if err := json.Unmarshal(raw, &s); err != nil {
		d.skipField(where, err)
		return
	}
	version := s.VersionInfo
	if state == envoystate.SecretStatic {
		version = ""
	}
	if err := s.LastUpdated.Err; err != nil {
		d.skipField(where+".last_updated", err)
	}
	d.addSecret(state, s.Name, version, s.LastUpdated.V.Time, s.Secret)
}

// secretsDump splits a SecretsConfigDump into its entries so that each decodes on its own.
func (d *configDump) secretsDump(where string, raw json.RawMessage) {
	var lists struct {
		Static  []json.RawMessage `json:"static_secrets"`
		Active  []json.RawMessage `json:"dynamic_active_secrets"`
		Warming []json.RawMessage `json:"dynamic_warming_secrets"`
	}
	if err := json.Unmarshal(raw, &lists); err != nil {
		d.skipField(where, err)
		return
	}
	for _, l := range []struct {
		field   string
		state   envoystate.SecretState
		entries []json.RawMessage
	}{
		{"static_secrets", envoystate.SecretStatic, lists.Static},
		{"dynamic_active_secrets", envoystate.SecretActive, lists.Active},
		{"dynamic_warming_secrets", envoystate.SecretWarming, lists.Warming},
	} {
		for i, e := range l.entries {
			d.secretEntry(joinPath(where, fmt.Sprintf("%s[%d]", l.field, i)), l.state, e)
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
		d.skipField(where, err)
		return
	}
	for i, e := range lists.Static {
		d.staticListener(joinPath(where, fmt.Sprintf("static_listeners[%d]", i)), e)
	}
	for i, e := range lists.Dynamic {
		d.dynamicListener(joinPath(where, fmt.Sprintf("dynamic_listeners[%d]", i)), e)
	}
}
