package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Redaction markers.
const (
	redactedPEM    = "[PEM block withheld]"
	redactedRun    = "[encoded blob withheld]"
	redactedBinary = "[binary withheld]"
)

// Thresholds of what RedactKeyMaterial withholds. An excerpt is for a person reading an error:
// no run of base64 or hex that long helps them, and every private key, whole or cut into PEM
// lines or JSON-escaped lines, is made of such runs.
const (
	minB64Run = 24 // a 64-character PEM line, or any part of one an excerpt could show
	minHexRun = 32
	// A run shorter than these is still withheld when it decodes to DER that parses as a
	// private key (a small EC key is 121 bytes: 164 base64 characters, so this rarely triggers).
)

// RedactKeyMaterial returns b with everything that could be key material replaced by a short
// marker: PEM blocks of every kind (BEGIN through END, or to the end of b when cut off), runs of
// base64 or hex long enough to carry key bytes (whether or not they decode to a whole key: an
// excerpt is a cut of a longer body, and the lines of a PEM key after the first decode to nothing
// recognisable), runs of any length that decode to DER parsable as a PKCS#1, PKCS#8 or SEC 1
// private key, and bytes that are mostly not text (raw DER). It is for excerpts of foreign bodies
// quoted in errors and findings: what it returns may be logged and exported.
func RedactKeyMaterial(b []byte) []byte { return redact(b, minB64Run) }

// RedactKeyMaterialInName is RedactKeyMaterial for a whole value (a file path, a secret name), not
// a cut of a longer body: a base64 run must be longer (64 characters, a whole PEM line) before it
// is withheld without decoding to a key, so that paths like /tmp/TestRun1234/002/tls.crt pass.
func RedactKeyMaterialInName(b []byte) []byte { return redact(b, nameMinRun) }

// nameMinRun is the run length RedactKeyMaterialInName withholds without decoding (see
// withholdName for paths).
const nameMinRun = 64

func redact(b []byte, minRun int) []byte {
	if len(b) == 0 {
		return b
	}
	b = redactBinary(b)
	// Segments of b: runs of base64/hex characters and PEM blocks, each withheld or not; the bytes
	// between segments are kept.
	type seg struct {
		from, to int
		hide     bool
	}
	var segs []seg
	for i := 0; i < len(b); {
		if bytes.HasPrefix(b[i:], []byte("-----BEGIN")) {
			j := len(b)
			if end := bytes.Index(b[i+10:], []byte("-----END")); end >= 0 {
				j = i + 10 + end + len("-----END")
				// through the closing "-----" of the END line
				if k := bytes.Index(b[j:], []byte("-----")); k >= 0 && k < 80 {
					j += k + 5
				}
			}
			segs = append(segs, seg{i, j, true})
			i = j
			continue
		}
		if isHex(b[i]) {
			// colon- or space-separated hex, as openssl prints key bytes
			j, digits, seps := i, 0, 0
			for j < len(b) && (isHex(b[j]) || (b[j] == ':' || b[j] == ' ') && j+1 < len(b) && isHex(b[j+1])) {
				if isHex(b[j]) {
					digits++
				} else {
					seps++
				}
				j++
			}
			if seps > 0 && digits >= minHexRun && digits >= seps {
				segs = append(segs, seg{i, j, true})
				i = j
				continue
			}
		}
		if isB64(b[i]) {
			j := i
			for j < len(b) && isB64(b[j]) {
				j++
			}
			// '=' padding belongs to the run
			for j < len(b) && b[j] == '=' {
				j++
			}
			hide := withhold(b[i:j], minRun)
			if minRun == nameMinRun {
				hide = withholdName(b[i:j])
			}
			segs = append(segs, seg{i, j, hide})
			i = j
			continue
		}
		i++
	}
	// A withheld blob's neighbours are withheld too when only a line break or an escape sits
	// between them: the last line of a PEM body, or the first of an excerpt cut mid-key, is
	// short, but it is key bytes all the same.
	near := func(a, c seg) bool {
		gap := b[a.to:c.from]
		return len(gap) <= 3 && len(bytes.Trim(gap, " \t\r\n\\\"")) == 0
	}
	for changed := true; changed; {
		changed = false
		for k := range segs {
			if segs[k].hide {
				continue
			}
			if k > 0 && segs[k-1].hide && near(segs[k-1], segs[k]) || k+1 < len(segs) && segs[k+1].hide && near(segs[k], segs[k+1]) {
				segs[k].hide, changed = true, true
			}
		}
	}
	var out []byte
	last := 0
	for k, sg := range segs {
		if !sg.hide {
			continue
		}
		if k > 0 && segs[k-1].hide && near(segs[k-1], sg) {
			last = sg.to // merged into the marker already written
			continue
		}
		out = append(out, b[last:sg.from]...)
		if bytes.HasPrefix(b[sg.from:], []byte("-----BEGIN")) {
			out = append(out, redactedPEM...)
		} else {
			out = append(out, redactedRun...)
		}
		last = sg.to
	}
	return append(out, b[last:]...)
}

func isB64(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// withhold decides for one run of base64-alphabet characters.
func withhold(run []byte, minRun int) bool {
	hexOnly, digits, upper, lower := true, false, false, false
	for _, c := range run {
		switch {
		case c >= '0' && c <= '9':
			digits = true
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= 'a' && c <= 'z':
			lower = true
		}
		if !isHex(c) && c != '=' {
			hexOnly = false
		}
	}
	if hexOnly && digits && (upper || lower) && len(run) >= max(minHexRun, minRun) {
		return true
	}
	// Words and identifiers (snake_case, Kubernetes names, SPIFFE paths) lack one of the three
	// classes; encoded bytes have all three in any 24 characters but rarely, and both cases in
	// any 48.
	if len(run) >= minRun && digits && upper && lower || len(run) >= 2*minRun && upper && lower {
		return true
	}
	return decodesToKey(run)
}

// withholdName is withhold for a run inside a name, where '/' separates path components: a run
// the length heuristics would withhold is kept when it reads as a path of words, each component
// letters (and '-', '_') with at most a trailing number, or a short one (a Go test's temporary
// directory, TestName1234/001). Random base64 of a key rarely has that shape in every component
// at once; whatever decodes to a key is withheld in any case.
func withholdName(run []byte) bool {
	if decodesToKey(run) {
		return true
	}
	return withhold(run, nameMinRun) && !pathOfWords(run)
}

func pathOfWords(run []byte) bool {
	for _, part := range bytes.Split(run, []byte("/")) {
		if len(part) <= 8 {
			continue
		}
		i := 0
		for i < len(part) && (part[i] >= 'A' && part[i] <= 'Z' || part[i] >= 'a' && part[i] <= 'z' || part[i] == '-' || part[i] == '_') {
			i++
		}
		for i < len(part) && part[i] >= '0' && part[i] <= '9' {
			i++
		}
		if i != len(part) {
			return false
		}
	}
	return true
}

// decodesToKey reports whether run is base64 or hex of a private key's DER.
func decodesToKey(run []byte) bool {
	if len(run) < 16 {
		return false
	}
	s := string(bytes.TrimRight(run, "="))
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if der, err := enc.DecodeString(s); err == nil && isPrivateKeyDER(der) {
			return true
		}
	}
	if der, err := hex.DecodeString(string(run)); err == nil && isPrivateKeyDER(der) {
		return true
	}
	return false
}

func isPrivateKeyDER(der []byte) bool {
	if len(der) < 2 || der[0] != 0x30 {
		return false
	}
	if _, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		return true
	}
	if _, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return true
	}
	if _, err := x509.ParseECPrivateKey(der); err == nil {
		return true
	}
	return false
}

func notText(r rune, n int) bool {
	return r == utf8.RuneError && n == 1 || !unicode.IsPrint(r) && r != '\n' && r != '\r' && r != '\t' && r != ' '
}

// redactBinary replaces stretches of bytes that are not text — raw DER, compressed data, a TLS
// record — by a marker: a stretch is where non-text bytes come within 16 bytes of each other (in
// random bytes, 17 text bytes in a row are rarer than one in a million), and one with 8 or more
// of them is withheld (a stray control character is left to the escaping).
func redactBinary(b []byte) []byte {
	type span struct{ from, to, bad int }
	var spans []span
	cur := span{from: -1}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if notText(r, n) {
			if cur.from >= 0 && i-cur.to <= 16 {
				cur.to, cur.bad = i+n, cur.bad+1
			} else {
				if cur.from >= 0 && cur.bad >= 8 {
					spans = append(spans, cur)
				}
				cur = span{from: i, to: i + n, bad: 1}
			}
		}
		i += n
	}
	if cur.from >= 0 && cur.bad >= 8 {
		spans = append(spans, cur)
	}
	if len(spans) == 0 {
		return b
	}
	var out []byte
	last := 0
	for _, s := range spans {
		out = append(out, b[last:s.from]...)
		out = append(out, redactedBinary+" ("+strconv.Itoa(s.to-s.from)+" bytes)"...)
		last = s.to
	}
	return append(out, b[last:]...)
}
