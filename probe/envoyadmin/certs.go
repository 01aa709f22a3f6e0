package envoyadmin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/certdrift/certdrift/pki"
)

// ParseCerts decodes the body of GET /certs. Contexts are returned in Envoy's order, duplicates
// included (Envoy lists one entry per live TLS context). An entry that does not decode is reported
// in the error and left out; the others are still returned, so a non-nil error may come with a
// partial result.
func ParseCerts(data []byte) ([]TLSContext, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("parse /certs: empty body")
	}
	if data[0] != '{' {
		return nil, fmt.Errorf("parse /certs: expected a JSON object, body starts with %q", preview(data))
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, jsonErr("parse /certs", err)
	}
	raw, ok := top["certificates"]
	if !ok {
		if len(top) == 0 {
			return nil, nil // "{}": an Envoy that prints no empty lists
		}
		return nil, fmt.Errorf("parse /certs: unexpected JSON shape: no \"certificates\" field (has %s)", keys(top))
	}
	var entries []json.RawMessage
	// snakeKeys after the whole body was checked above, so syntax error offsets are the body's.
	if err := json.Unmarshal(snakeKeys(raw), &entries); err != nil {
		return nil, jsonErr("parse /certs: certificates", err)
	}
	var (
		out  []TLSContext
		errs []error
	)
	for i, e := range entries {
		var c certificateJSON
		if err := decodeJSON(e, &c); err != nil {
			errs = append(errs, fmt.Errorf("certificates[%d]: %w", i, err))
			continue
		}
		ctx := TLSContext{
			CA:    certDetails(c.CACert),
			Chain: certDetails(c.CertChain),
		}
		out = append(out, ctx)
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("parse /certs: %w", err)
	}
	return out, nil
}

func certDetails(in []certDetailsJSON) []CertDetail {
	var out []CertDetail
	for _, d := range in {
		cd := CertDetail{
			Path:                d.Path,
			SerialText:          d.SerialNumber,
			ValidFrom:           d.ValidFrom.Time,
			Expiration:          d.ExpirationTime.Time,
			DaysUntilExpiration: uint64(d.DaysUntilExpiration),
		}
		// Envoy prints "0" for serials it could not format and hex of any case and length
		// otherwise; a failure leaves Serial nil and the text kept for the report.
		if n, err := pki.ParseSerial(cd.SerialText); err == nil {
			cd.Serial = n
		}
		for _, san := range d.SubjectAltNames {
			switch {
			case san.DNS != nil:
				cd.DNSNames = append(cd.DNSNames, *san.DNS)
			case san.URI != nil:
				cd.URIs = append(cd.URIs, *san.URI)
			case san.IPAddress != nil:
				cd.IPAddresses = append(cd.IPAddresses, *san.IPAddress)
			}
		}
		out = append(out, cd)
	}
	return out
}

// preview is a short printable excerpt of a body for error messages. Admin bodies hold
// certificates, never keys (Envoy redacts them), but a hostile server could send anything, so the
// excerpt is short and limited to printable ASCII.
func preview(b []byte) string { return previewN(b, 40) }

func previewN(b []byte, n int) string {
	if bytes.Contains(b[:min(len(b), 4096)], []byte("PRIVATE KEY")) {
		return "[withheld: looks like key material]"
	}
	if len(b) > n {
		b = b[:n]
	}
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '.'
		}
		out = append(out, c)
	}
	return string(out)
}

func keys[V any](m map[string]V) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, fmt.Sprintf("%q", preview([]byte(k))))
	}
	sort.Strings(ks)
	if len(ks) > 5 {
		ks = append(ks[:5], "…")
	}
	return strings.Join(ks, ", ")
}
