package envoyadmin

// Why this package decodes Envoy's admin JSON with encoding/json instead of go-control-plane:
//
// Envoy prints /certs and /config_dump as proto3 JSON. Decoding them with protojson into
// go-control-plane's generated types is the obvious choice, and it is what this package did until
// issue 4's memory budget (inventory peak RSS < 50 MB). go-control-plane's ≈22 generated packages
// (plus cncf/xds and cel.dev/expr) register descriptors and run init and validation code that
// fault in their text, rodata and pclntab pages in every certdrift process, audit and serve alike.
// Measured: a binary that blank-imports every external package certdrift's non-test code imports
// has 39.4 MB RSS; the same list without go-control-plane and the direct google.golang.org/protobuf
// imports has 24.9 MB. In the whole binary, where client-go and client_golang keep the protobuf
// runtime linked, dropping it took `certdrift version` from ≈ 42 to ≈ 38 MB RSS and the binary from
// 87 to 73 MB (docs/benchmarks.md). certdrift reads a few dozen fields of about twenty messages, so
// it describes exactly those as plain structs (wire.go) and decodes them as protojson would: proto
// field names or their lowerCamelCase JSON names, unknown fields ignored, Any values inline with
// "@type" (v2 names read as their v3 replacements, unknown types skipped), int64/uint64 as numbers
// or strings, bytes as standard or URL-safe base64 with or without padding, timestamps in RFC 3339.
// Tests may still use go-control-plane to build fixtures; TestBinaryDependencies (cmd/certdrift) keeps
// it out of the binary.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// legacyTypes maps v2 type names, which old Envoys print in /config_dump, to the v3 messages that
// replaced them with the same field names for everything certdrift reads.
var legacyTypes = map[string]string{
	"envoy.admin.v2alpha.SecretsConfigDump":   "envoy.admin.v3.SecretsConfigDump",
	"envoy.admin.v2alpha.ListenersConfigDump": "envoy.admin.v3.ListenersConfigDump",
	"envoy.api.v2.Listener":                   "envoy.config.listener.v3.Listener",
	"envoy.api.v2.auth.Secret":                "envoy.extensions.transport_sockets.tls.v3.Secret",
	"envoy.api.v2.auth.DownstreamTlsContext":  "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
	"envoy.api.v2.auth.UpstreamTlsContext":    "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
}

// typeName is the message name of a type URL, with v2 names mapped to v3.
func typeName(url string) string {
	name := url[strings.LastIndexByte(url, '/')+1:]
	if v3, ok := legacyTypes[name]; ok {
		return v3
	}
	return name
}

// errUnknownType says an Any holds a type certdrift cannot read.
var errUnknownType = errors.New("unknown type")

// anyJSON is a google.protobuf.Any in proto3 JSON: {"@type": url, ...the message's fields}. The
// message is decoded while the enclosing document is, so a malformed payload fails its entry as
// protojson would; a type certdrift does not read is kept as its URL only, its fields unread.
type anyJSON struct {
	URL string
	// Msg is one of the *…JSON types of anyTypes, nil for any other type.
	Msg any
	// untyped is the object when it has no "@type": v2alpha-era dumps printed the message itself
	// where v3 has an Any (SecretsConfigDump.DynamicSecret.secret was an api.v2.auth.Secret), so
	// the field's own type reads it (see as).
	untyped json.RawMessage
}

// anyTypes are the Any payloads certdrift reads, by v3 message name.
var anyTypes = map[string]func() any{
	tSecret:         func() any { return new(secretJSON) },
	tListener:       func() any { return new(listenerJSON) },
	tDownstreamTLS:  func() any { return new(downstreamTLSJSON) },
	tQUICDownstream: func() any { return new(quicDownstreamJSON) },
	tSPIFFE:         func() any { return new(spiffeJSON) },
}

// knownUnread are types certdrift knows and deliberately does not read: a listener transport
// socket of one of these is not a downstream TLS context, rather than an unknown socket that might
// wrap one.
var knownUnread = map[string]bool{
	tUpstreamTLS:   true,
	tQUICUpstream:  true,
	tRawBuffer:     true,
	tGenericSecret: true,
}

func (a *anyJSON) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var t struct {
		Type *string `json:"@type"`
	}
	if err := json.Unmarshal(b, &t); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			return badValue(te.Value, reflect.TypeFor[anyJSON]())
		}
		return err // "@type" not a string: its path is kept
	}
	url := ""
	if t.Type != nil {
		url = *t.Type
	}
	a.URL = url
	if url == "" {
		a.untyped = append(json.RawMessage(nil), b...) // b is the decoder's buffer
		return nil
	}
	newMsg, ok := anyTypes[typeName(url)]
	if !ok {
		return nil
	}
	m := newMsg()
	if err := json.Unmarshal(b, m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// Returned as is: the enclosing decode prefixes the path to this Any.
			te.Value += " (in " + previewN([]byte(typeName(url)), 120) + ")"
			return te
		}
		return fmt.Errorf("%s: %w", previewN([]byte(url), 160), err)
	}
	a.Msg = m
	return nil
}

// as returns the payload as the message named want (a key of anyTypes): the typed payload, or an
// object without "@type" decoded as want. It returns nil for an absent Any, and for one of another
// type (the caller reports that with unknown).
func (a *anyJSON) as(want string) (any, error) {
	if a == nil || a.Msg != nil || a.untyped == nil {
		return a.msg(), nil
	}
	m := anyTypes[want]()
	if err := json.Unmarshal(a.untyped, m); err != nil {
		return nil, err
	}
	a.Msg, a.untyped = m, nil
	return m, nil
}

// msg is a nil-safe accessor: an absent Any has no message.
func (a *anyJSON) msg() any {
	if a == nil {
		return nil
	}
	return a.Msg
}

// unknown is the error for an Any whose payload is not the wanted kind: errUnknownType for a type
// certdrift does not know, else "not a <want>".
func (a *anyJSON) unknown(want string) error {
	if a == nil {
		return errors.New("missing")
	}
	if a.URL == "" {
		return errors.New("no @type")
	}
	if _, ok := anyTypes[typeName(a.URL)]; ok || knownUnread[typeName(a.URL)] {
		return fmt.Errorf("not a %s", want)
	}
	return fmt.Errorf("%w %q", errUnknownType, previewN([]byte(a.URL), 160))
}

// caught is a field whose malformed value must not fail the message around it: the error is kept
// for the caller to report on the object it belongs to (a Secret's ChainErr, a CertDetail's Err)
// rather than losing the whole entry to it.
type caught[T any] struct {
	V T
	// Err is the decode error, its path relative to this field (see fieldErr).
	Err error
	// Set is true when the field was present and not null.
	Set bool
}

func (c *caught[T]) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	c.Set = true
	if err := json.Unmarshal(b, &c.V); err != nil {
		var zero T
		c.V, c.Err = zero, err
	}
	return nil
}

// at returns c's error as fieldErr(path, ...), nil when there is none (or c is nil).
func (c *caught[T]) at(path string) error {
	if c == nil || c.Err == nil {
		return nil
	}
	return fieldErr(path, c.Err)
}

// present marks a field that certdrift notes but never decodes (its content may be large, or
// secret).
type present bool

func (p *present) UnmarshalJSON(b []byte) error {
	*p = string(b) != "null"
	return nil
}

// fieldErr says "path: what was found where what was expected", path being the field's (proto
// names, dotted) followed by the path inside it that encoding/json recorded.
func fieldErr(path string, err error) error {
	part, reason := pathReason(path, err)
	return fmt.Errorf("%s: %w", part, reason)
}

func joinPath(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "." + b
}

// peekType reads the "@type" of a JSON object without decoding the rest. An object without one is
// an empty Any ("") as in protojson, which accepts only {} that way; other fields are not checked
// here because certdrift skips an Any of type "" like any unknown type.
func peekType(raw json.RawMessage) (string, error) {
	var t struct {
		Type string `json:"@type"`
	}
	if err := decodeJSON(raw, &t); err != nil {
		return "", err
	}
	return t.Type, nil
}

// decodeJSON decodes one JSON value into v, with errors that name the field rather than Go types.
func decodeJSON(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return shapeErr(err)
	}
	return nil
}

// shapeErr rewrites encoding/json's errors, which name Go types, to say what was found where: the
// path of proto field names (encoding/json builds it for *json.UnmarshalTypeError, which is why
// the scalar types below and anyJSON return that type) and what the field holds.
func shapeErr(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %w", se.Offset, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return fmt.Errorf("unexpected JSON shape: %s where %s expected at %q", te.Value, expected(te.Type), previewN([]byte(field), 160))
	}
	return err
}

// expected says in JSON terms what a Go type decodes from.
func expected(t reflect.Type) string {
	switch t {
	case nil:
		return "a value"
	case reflect.TypeFor[pbTime]():
		return "an RFC 3339 timestamp string"
	case reflect.TypeFor[pbUint]():
		return "an unsigned integer"
	case reflect.TypeFor[pbBytes]():
		return "a base64 string"
	case reflect.TypeFor[anyJSON]():
		return "an object with @type"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return expected(t.Elem())
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Bool:
		return "a bool"
	case reflect.String:
		return "a string"
	case reflect.Interface:
		return "a value"
	}
	return "a number"
}

// badValue is the error of the scalar types: a *json.UnmarshalTypeError so that encoding/json
// adds the field path to it. what describes the value found without necessarily quoting it.
func badValue(what string, t reflect.Type) error {
	return &json.UnmarshalTypeError{Value: what, Type: t}
}

// jsonErr makes a JSON error of a whole body say where it is, since admin bodies are large.
func jsonErr(what string, err error) error {
	return fmt.Errorf("%s: %w", what, shapeErr(err))
}

// snakeKeys rewrites every lowerCamelCase object key of a valid JSON document in snake_case, so
// that one struct tag serves both spellings protojson accepts: Envoy prints proto field names
// (server_names) while control planes such as Envoy Gateway emit JSON names (serverNames). Only
// keys shaped like a JSON name (a lowercase letter, then letters and digits, at least one upper
// case) are touched; keys of maps certdrift does not read may change too, harmlessly. The input is
// returned as is when nothing changes. Quote structure is never altered, so an invalid document
// stays invalid for the decoder to report.
func snakeKeys(data []byte) []byte {
	var out []byte // allocated at the first key that changes
	last := 0
	for i := 0; i < len(data); i++ {
		if data[i] != '"' {
			continue
		}
		j := i + 1
		for j < len(data) && data[j] != '"' {
			if data[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(data) {
			break // unterminated string: left for the decoder
		}
		k := j + 1
		for k < len(data) && (data[k] == ' ' || data[k] == '\t' || data[k] == '\n' || data[k] == '\r') {
			k++
		}
		if k < len(data) && data[k] == ':' && isJSONName(data[i+1:j]) {
			if out == nil {
				out = make([]byte, 0, len(data)+len(data)/32)
			}
			out = append(out, data[last:i+1]...)
			for _, c := range data[i+1 : j] {
				if 'A' <= c && c <= 'Z' {
					out = append(out, '_', c+('a'-'A'))
				} else {
					out = append(out, c)
				}
			}
			last = j
		}
		i = j
	}
	if out == nil {
		return data
	}
	return append(out, data[last:]...)
}

// isJSONName reports whether key looks like protojson's lowerCamelCase name of a snake_case field.
func isJSONName(key []byte) bool {
	if len(key) == 0 || key[0] < 'a' || key[0] > 'z' {
		return false
	}
	upper := false
	for _, c := range key {
		switch {
		case 'A' <= c && c <= 'Z':
			upper = true
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		default:
			return false
		}
	}
	return upper
}

// pbTime is a google.protobuf.Timestamp in proto3 JSON (RFC 3339, "Z" or an offset, up to nine
// fractional digits); absent or null leaves the zero time rather than 1970.
type pbTime struct{ time.Time }

func (t *pbTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return badValue(jsonValue(b), reflect.TypeFor[pbTime]())
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || v.Year() < 1 || v.Year() > 9999 {
		return badValue(fmt.Sprintf("string %q", previewN([]byte(s), 40)), reflect.TypeFor[pbTime]())
	}
	t.Time = v.UTC()
	return nil
}

// pbUint is a uint32 or uint64 in proto3 JSON: a number, or the same in a string (how uint64
// values are printed). Exponent forms of integers are accepted, as protojson does.
type pbUint uint64

func (u *pbUint) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return badValue(jsonValue(b), reflect.TypeFor[pbUint]())
		}
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		*u = pbUint(n)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f != math.Trunc(f) || f >= 1<<64 {
		return badValue(jsonValue(b), reflect.TypeFor[pbUint]())
	}
	*u = pbUint(f)
	return nil
}

// pbBytes is a bytes field in proto3 JSON: base64, standard or URL-safe, padded or not.
type pbBytes []byte

func (p *pbBytes) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return badValue(jsonValue(b), reflect.TypeFor[pbBytes]())
	}
	enc := base64.StdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.URLEncoding
	}
	if len(s)%4 != 0 {
		enc = enc.WithPadding(base64.NoPadding)
	}
	v, err := enc.DecodeString(s)
	if err != nil {
		// Never echo the value: it may be key material Envoy failed to redact.
		return badValue(fmt.Sprintf("string of %d characters (%v)", len(s), err), reflect.TypeFor[pbBytes]())
	}
	*p = v
	return nil
}

// jsonValue describes a JSON value for an error: its kind, and for a number or a short string the
// value itself (a bytes field uses its own description, never the value).
func jsonValue(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case '"':
		return "string " + previewN(b, 42)
	}
	return "number " + previewN(b, 40)
}
