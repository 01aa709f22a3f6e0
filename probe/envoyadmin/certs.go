package envoyadmin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// ParseCerts decodes the body of GET /certs. Contexts are returned in Envoy's order, duplicates
// included (Envoy lists one entry per live TLS context). The error is non-nil only when the body as
// a whole is not a /certs answer: an entry that does not decode is kept with its Err, a certificate
// with a field that does not read is kept with its Err (see TLSContext and CertDetail).
func ParseCerts(data []byte) ([]envoystate.TLSContext, error) {
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
	var out []envoystate.TLSContext
	for i, e := range entries {
		where := fmt.Sprintf("certificates[%d]", i)
		var c certificateJSON
		if err := json.Unmarshal(e, &c); err != nil {
			out = append(out, envoystate.TLSContext{Err: fieldErr(where, err)})
			continue
		}
		out = append(out, envoystate.TLSContext{
			CA:    certDetails(c.CACert, where+".ca_cert"),
			Chain: certDetails(c.CertChain, where+".cert_chain"),
		})
	}
	return out, nil
}

func certDetails(in []certDetailsJSON, where string) []envoystate.CertDetail {
	var out []envoystate.CertDetail
	for i, d := range in {
		path := fmt.Sprintf("%s[%d]", where, i)
		var errs []error
		cd := envoystate.CertDetail{
			Path:                d.Path.V,
			SerialText:          d.SerialNumber.V,
			ValidFrom:           d.ValidFrom.V.Time,
			Expiration:          d.ExpirationTime.V.Time,
			DaysUntilExpiration: uint64(d.DaysUntilExpiration.V),
		}
		for _, f := range []struct {
			name string
			err  error
		}{
			{"path", d.Path.Err}, {"serial_number", d.SerialNumber.Err}, {"subject_alt_names", d.SubjectAltNames.Err},
			{"days_until_expiration", d.DaysUntilExpiration.Err}, {"valid_from", d.ValidFrom.Err}, {"expiration_time", d.ExpirationTime.Err},
		} {
			if f.err != nil {
				errs = append(errs, fieldErr(path+"."+f.name, f.err))
			}
		}
		// Envoy prints "0" for serials it could not format and hex of any case and length
		// otherwise; a failure leaves Serial nil and the text kept for the report.
		if d.SerialNumber.Err == nil {
			n, err := pki.ParseSerial(cd.SerialText)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.serial_number: %w", path, err))
			}
			cd.Serial = n
		}
		if d.ExpirationTime.Err == nil && cd.Expiration.IsZero() {
			what := "missing"
			if d.ExpirationTime.Set {
				what = "the zero time"
			}
			errs = append(errs, fmt.Errorf("%s.expiration_time: %s", path, what))
		}
		for _, san := range d.SubjectAltNames.V {
			switch {
			case san.DNS != nil:
				cd.DNSNames = append(cd.DNSNames, *san.DNS)
			case san.URI != nil:
				cd.URIs = append(cd.URIs, *san.URI)
			case san.IPAddress != nil:
				cd.IPAddresses = append(cd.IPAddresses, *san.IPAddress)
			}
		}
		cd.Err = errors.Join(errs...)
		out = append(out, cd)
	}
	return out
}

// preview is a short excerpt of a body for error messages. Admin bodies hold certificates, never
// keys (Envoy redacts them), but a hostile server could send anything: every excerpt passes
// pki.RedactKeyMaterial (PEM blocks, base64 and hex blobs, binary), then is cut short and escaped
// as printable does.
func preview(b []byte) string { return previewN(b, 40) }

// excerptWindow is how much of a body is redacted before the excerpt is cut from it: far more than
// any excerpt, so a blob that begins inside the excerpt is seen whole enough to be withheld.
const excerptWindow = 4096

func previewN(b []byte, n int) string {
	return escape(pki.RedactKeyMaterial(b[:min(len(b), excerptWindow)]), n)
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
