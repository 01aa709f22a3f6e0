package envoyadmin

import (
	"reflect"
	"unicode"
	"unicode/utf8"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// maxText bounds a name, path or SAN taken from an admin: they become label values, table cells
// and finding text.
const maxText = 512

// cleanText returns s when it is a plausible name: at most maxText bytes of printable UTF-8 with
// nothing pki.RedactKeyMaterial would withhold. Anything else becomes its escaped, redacted excerpt
// (so it still differs from other values and says what it was) — never the bytes themselves.
func cleanText(s string) string {
	if len(s) <= maxText && utf8.ValidString(s) && string(pki.RedactKeyMaterialInName([]byte(s))) == s {
		ok := true
		for _, r := range s {
			if !unicode.IsPrint(r) {
				ok = false
				break
			}
		}
		if ok {
			return s
		}
	}
	return "invalid:" + previewN([]byte(s), 80)
}

// sanitizeContexts and sanitizeConfig clean every string a snapshot takes from the admin (names,
// paths, SANs, serial text) with cleanText, walking the envoystate types; Snapshot cleans the
// version itself, and errors are built from excerpts already. They run once per parsed answer,
// before the Memo keeps it. A serial that parsed as hex is kept as printed: a long hex run is what
// a serial is.
func sanitizeContexts(cs []envoystate.TLSContext) {
	for i := range cs {
		for _, ds := range [][]envoystate.CertDetail{cs[i].CA, cs[i].Chain} {
			for j := range ds {
				serial := ds[j].SerialText
				cleanValue(reflect.ValueOf(&ds[j]).Elem())
				if ds[j].Serial != nil {
					ds[j].SerialText = serial
				}
			}
		}
	}
}

func sanitizeConfig(secrets []envoystate.Secret, listeners []envoystate.FilterChainTLS) {
	cleanValue(reflect.ValueOf(&secrets).Elem())
	cleanValue(reflect.ValueOf(&listeners).Elem())
}

var pkgPath = reflect.TypeFor[envoystate.Snapshot]().PkgPath()

func cleanValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() {
			if c := cleanText(v.String()); c != v.String() {
				v.SetString(c)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.String || v.Type().Elem().PkgPath() == pkgPath {
			for i := 0; i < v.Len(); i++ {
				cleanValue(v.Index(i))
			}
		}
	case reflect.Pointer:
		if !v.IsNil() && v.Type().Elem().PkgPath() == pkgPath {
			cleanValue(v.Elem())
		}
	case reflect.Struct:
		if v.Type().PkgPath() != pkgPath {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				cleanValue(v.Field(i))
			}
		}
	}
}
