package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// TableWidth is the width the table wraps its prose at: findings, evidence and advice fit a
// 100-column terminal; only a single word longer than that (a long path or URL) runs over.
// -o json keeps every field whole.
const TableWidth = 100

// ShortFingerprintLen is how many hex characters of a SHA-256 fingerprint the table shows, after
// "sha256:": 48 bits tell certificates apart by eye; -o json has the whole one.
const ShortFingerprintLen = 12

// fingerprintRE matches a full SHA-256 fingerprint (64 hex digits) that is not part of a longer
// hex run; longHexRE a long hex run (a serial number: up to 20 bytes) that is not a fingerprint.
var (
	fingerprintRE = regexp.MustCompile(`\b[0-9a-fA-F]{64}\b|\bsha256:[0-9a-fA-F]{13,64}\b`)
	longHexRE     = regexp.MustCompile(`\b[0-9a-fA-F]{20,63}\b`)
)

// RenderTable writes r for people, in a terminal: a header saying what was audited; the findings
// grouped by Envoy (findings without an Envoy under their desired source), the group with the
// worst finding first and, inside a group, the worst finding first; each finding as a
// "SEVERITY CODE subject" line with its message, the fingerprints it compares labelled by view,
// and its advice wrapped below it; the bindings as a table with a header; and a summary line, so
// that a clean run is visibly not an empty one. Fingerprints, serials and long paths are
// shortened; -o json has them whole.
func RenderTable(w io.Writer, r Report) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, headerLine(r))
	groups := groupFindings(r.Findings)
	if len(groups) > 0 {
		fmt.Fprintf(bw, "\nFINDINGS\n")
	}
	for _, g := range groups {
		fmt.Fprintf(bw, "\n%s %s\n", g.kind, clean(g.name))
		// Many findings of one code about one subject (a chain of 500 expired certificates, one
		// finding per certificate) are a few lines in the table; -o json keeps every one.
		same := map[string]int{}
		for _, f := range g.findings {
			same[collapseKey(f)]++
		}
		shown := map[string]int{}
		for _, f := range g.findings {
			k := collapseKey(f)
			if shown[k]++; shown[k] > collapseAfter {
				if shown[k] == collapseAfter+1 {
					fmt.Fprintf(bw, "  %-8s %s  … and %d more like these (-o json lists them all)\n", strings.ToUpper(f.Severity.String()), clean(string(f.Code)), same[k]-collapseAfter)
				}
				continue
			}
			writeFinding(bw, f, g.kind)
		}
	}
	if len(r.Bindings) > 0 {
		fmt.Fprintln(bw)
		writeBindings(bw, r.Bindings)
	}
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, summaryLine(r))
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write table report: %w", err)
	}
	return nil
}

// headerLine says when and over what the audit ran, before any finding.
func headerLine(r Report) string {
	h := "certdrift audit"
	if !r.GeneratedAt.IsZero() {
		h += " at " + r.GeneratedAt.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	s := r.Summary
	return fmt.Sprintf("%s: %s, %s, %s", h, plural(s.DesiredSources, "desired source"), plural(s.Envoys, "envoy"), plural(s.Handshakes, "handshake"))
}

// writeFinding writes one finding: the head line, then the message, the labelled fingerprints
// and the advice, each wrapped under it.
func writeFinding(w io.Writer, f Finding, groupKind string) {
	head := fmt.Sprintf("  %-8s %s", strings.ToUpper(f.Severity.String()), clean(string(f.Code)))
	writeWrapped(w, head+"  ", "    ", subjectText(f.Subject, groupKind))
	writeWrapped(w, "    ", "    ", tableText(f.Message))
	if f.Inferred {
		fmt.Fprintln(w, "    binding inferred from matching names, not configured or seen by path: check it")
	}
	if ev := evidenceLine(f.Evidence); ev != "" {
		writeWrapped(w, "    ", "    ", ev)
	}
	if f.Advice != "" {
		writeWrapped(w, "    advice: ", "            ", tableText(f.Advice))
	}
}

// evidenceLine labels the certificates a finding compares by view — "desired sha256:ab12…
// loaded serial 17e1…" — from the evidence keys the checks write (desired_fingerprint_sha256,
// loaded_serial, …; or fingerprint_sha256 with view for a finding about one view). A view seen
// only through Envoy's /certs has a serial and no fingerprint.
func evidenceLine(ev map[string]string) string {
	var parts []string
	for _, view := range []string{"desired", "loaded", "served"} {
		fp, serial := ev[view+"_fingerprint_sha256"], ev[view+"_serial"]
		if fp == "" && serial == "" && ev["view"] == view {
			fp, serial = ev["fingerprint_sha256"], ev["serial"]
		}
		switch {
		case fp != "":
			parts = append(parts, view+" "+shortFingerprint(fp))
		case serial != "":
			parts = append(parts, view+" serial "+shortHex(serial))
		}
	}
	if len(parts) < 2 && ev["view"] == "" {
		// One view alone, without the finding naming it, labels nothing the message lacks.
		return ""
	}
	return clean(strings.Join(parts, "  "))
}

// writeWrapped writes text in lines of at most TableWidth columns: first prefixes the first line,
// rest the others. A word longer than a line is kept whole on its own line.
func writeWrapped(w io.Writer, first, rest, text string) {
	prefix, line := first, ""
	flush := func() {
		fmt.Fprintln(w, strings.TrimRight(prefix+line, " "))
		prefix, line = rest, ""
	}
	for _, word := range strings.Fields(text) {
		if line != "" && utf8.RuneCountInString(prefix+line+" "+word) > TableWidth {
			flush()
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" || prefix == first {
		flush()
	}
}

// tableText is a message or advice as the table shows it: safe for a terminal, fingerprints and
// serials shortened, and Go's repeated error prefixes said once. Paths stay whole here (the
// message is where a reader copies one from); the head line and the bindings table shorten them.
func tableText(s string) string {
	s = shortenFingerprints(s)
	s = longHexRE.ReplaceAllStringFunc(s, shortHex)
	s = unstutter(s)
	return strings.Join(strings.Fields(clean(s)), " ")
}

// stutterREs undo Go's habit of wrapping an error that already says what its wrapper says (Run
// applies them to every finding's message):
// "dial 10.0.0.1:443: dial tcp 10.0.0.1:443: …" (tlsprobe over net.Dialer), "GET /certs: request:
// Get \"/certs\": …" (the admin client over net/http), "open X: open X: …" (os errors).
var stutterREs = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`\bdial (\S+): (dial \w+ )`), "$2"},
	{regexp.MustCompile(`\b(GET \S+): (?:request: )?Get "[^"]*": `), "$1: "},
	{regexp.MustCompile(`\b(open|read|stat|lstat|readlink) (\S+): (?:\w+ )?(?:open|read|stat|lstat|readlink) \S+: `), "$1 $2: "},
}

func unstutter(s string) string {
	for _, st := range stutterREs {
		s = st.re.ReplaceAllString(s, st.repl)
	}
	return s
}

// maxPathLen is the longest path the table prints whole; longer ones keep their last elements,
// which name the file (a kubelet volume's directory and key, e.g. …/secret-volume/tls.crt).
const maxPathLen = 40

func shortPath(word string) string {
	trail := strings.TrimLeft(word, `("'`)
	lead := word[:len(word)-len(trail)]
	if !strings.HasPrefix(trail, "/") || utf8.RuneCountInString(word) <= maxPathLen {
		return word
	}
	parts := strings.Split(trail, "/")
	if len(parts) <= 3 {
		return word
	}
	return lead + "…/" + strings.Join(parts[len(parts)-2:], "/")
}

func shortFingerprint(fp string) string {
	fp = strings.ToLower(strings.TrimPrefix(fp, "sha256:"))
	if len(fp) > ShortFingerprintLen {
		fp = fp[:ShortFingerprintLen] + "…"
	}
	return "sha256:" + fp
}

// shortHex shortens a serial to 12 hex digits: enough to match against openssl's output by eye.
func shortHex(h string) string {
	if len(h) > 16 {
		return strings.ToLower(h[:12]) + "…"
	}
	return strings.ToLower(h)
}

// collapseAfter is how many findings of one code, severity and subject the table shows before
// folding the rest into one line.
const collapseAfter = 3

func collapseKey(f Finding) string {
	return fmt.Sprintf("%s\x00%d\x00%+v\x00%s", f.Code, f.Severity, f.Subject, f.Advice)
}

// boundBy names a binding's origin in words, for the bindings table's last column and legend.
var boundBy = map[string]struct{ word, means string }{
	OriginConfig:   {"config", "named in the config file or a pod annotation"},
	OriginPath:     {"file path", "the file Envoy reads (directly or through SDS) is the source's"},
	OriginSDSName:  {"SDS name", "an SDS secret named after the source"},
	OriginInferred: {"inferred", "a guess from matching names (check it)"},
}

// writeBindings lists every binding with its state, so a reader sees what converged next to what
// did not: findings alone cannot tell a healthy Envoy from one that was never checked. One header
// names the columns; each Envoy's bindings follow its name (pod names are long, and one Envoy
// holds many bindings), a binding not judged is followed by why, and a legend says what the
// "bound by" words mean.
func writeBindings(w io.Writer, bs []Binding) {
	type row struct {
		cells  [4]string
		reason string
	}
	head := [4]string{"SOURCE", "STATE", "HELD AS", "BOUND BY"}
	var envoys []string
	rows := map[string][]row{}
	used := map[string]bool{}
	for _, b := range bs {
		src := b.Source
		if b.Item != "" {
			src += "/" + b.Item
		}
		if b.Trust {
			src += " (CA bundle)"
		}
		var held []string
		if b.Secret != "" {
			held = append(held, "SDS "+b.Secret)
		}
		if b.File != "" {
			held = append(held, "file "+shortPath(b.File))
		}
		origin := cmpOr(b.Origin, "-")
		if o, ok := boundBy[b.Origin]; ok {
			origin = o.word
			used[b.Origin] = true
		}
		if _, ok := rows[b.Envoy]; !ok {
			envoys = append(envoys, b.Envoy)
		}
		rows[b.Envoy] = append(rows[b.Envoy], row{cells: [4]string{
			shortCell(clean(src)), strings.ToUpper(cmpOr(b.State, StateUnknown)),
			shortCell(clean(cmpOr(strings.Join(held, ", "), "-"))), clean(origin)}, reason: b.Reason})
	}
	var width [4]int
	for i, h := range head {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, rs := range rows {
		for _, r := range rs {
			for i, c := range r.cells {
				width[i] = max(width[i], utf8.RuneCountInString(c))
			}
		}
	}
	line := func(cells [4]string) string {
		var b strings.Builder
		b.WriteString("   ")
		for i, c := range cells {
			b.WriteString(c)
			if i < len(cells)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)+2))
			}
		}
		return b.String()
	}
	fmt.Fprintln(w, "BINDINGS")
	fmt.Fprintln(w, line(head))
	for _, e := range envoys {
		fmt.Fprintf(w, " envoy %s\n", clean(e))
		for _, r := range rows[e] {
			fmt.Fprintln(w, line(r.cells))
			if r.reason != "" {
				writeWrapped(w, "     not judged: ", "       ", clean(r.reason))
			}
		}
	}
	var legend []string
	for _, o := range []string{OriginConfig, OriginPath, OriginSDSName, OriginInferred} {
		if used[o] {
			legend = append(legend, boundBy[o].word+": "+boundBy[o].means)
		}
	}
	if len(legend) > 0 {
		writeWrapped(w, " bound by — ", "   ", strings.Join(legend, "; "))
	}
}

// maxCell is the widest a bindings cell gets; longer names keep both ends (namespace and key).
const maxCell = 44

func shortCell(s string) string {
	r := []rune(s)
	if len(r) <= maxCell {
		return s
	}
	half := (maxCell - 1) / 2
	return string(r[:half]) + "…" + string(r[len(r)-(maxCell-1-half):])
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// RenderJSON writes r as indented JSON with the field names of the audit types' json tags. Empty
// lists are written as [] rather than null so that consumers need not special-case a clean run.
func RenderJSON(w io.Writer, r Report) error {
	if r.Bindings == nil {
		r.Bindings = []Binding{}
	}
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	if r.Summary.Findings == nil {
		r.Summary.Findings = map[string]int{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Subjects and messages carry names from certificates and configs; HTML escaping would only
	// make them harder to read and grep.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write json report: %w", err)
	}
	return nil
}

type group struct {
	kind     string // "envoy", "source" or "other"
	name     string
	worst    Severity
	findings []Finding
}

var kindOrder = map[string]int{"envoy": 0, "source": 1, "other": 2}

func groupFindings(fs []Finding) []*group {
	byKey := map[string]*group{}
	var groups []*group
	for _, f := range fs {
		kind, name := "other", "(no envoy or source)"
		switch {
		case f.Subject.Envoy != "":
			kind, name = "envoy", f.Subject.Envoy
		case f.Subject.Source != "":
			kind, name = "source", f.Subject.Source
		}
		key := kind + "\x00" + name
		g := byKey[key]
		if g == nil {
			g = &group{kind: kind, name: name}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.findings = append(g.findings, f)
		if f.Severity > g.worst {
			g.worst = f.Severity
		}
	}
	for _, g := range groups {
		sort.SliceStable(g.findings, func(i, j int) bool {
			a, b := g.findings[i], g.findings[j]
			if a.Severity != b.Severity {
				return a.Severity > b.Severity
			}
			if a.Code != b.Code {
				return codeIndex(a.Code) < codeIndex(b.Code)
			}
			return subjectText(a.Subject, "") < subjectText(b.Subject, "")
		})
	}
	sort.SliceStable(groups, func(i, j int) bool {
		a, b := groups[i], groups[j]
		if a.worst != b.worst {
			return a.worst > b.worst
		}
		if a.kind != b.kind {
			return kindOrder[a.kind] < kindOrder[b.kind]
		}
		return a.name < b.name
	})
	return groups
}

// codeIndex orders codes as AllCodes documents them; unknown codes sort last.
func codeIndex(c Code) int {
	for i, k := range AllCodes {
		if k == c {
			return i
		}
	}
	return len(AllCodes)
}

// subjectText renders the subject fields that the group header does not already say, as
// key=value pairs in a fixed order.
func subjectText(s Subject, groupKind string) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+shortPath(clean(v)))
		}
	}
	if groupKind != "envoy" {
		add("envoy", s.Envoy)
	}
	if groupKind != "source" {
		add("source", s.Source)
	}
	add("item", s.Item)
	add("secret", s.Secret)
	add("endpoint", s.Endpoint)
	add("sni", s.SNI)
	add("file", s.File)
	return strings.Join(parts, " ")
}

// summaryLine closes the table: what was found across what was judged, and when not everything
// could be judged, a second line saying so (a report that could not look is not clean).
func summaryLine(r Report) string {
	counts := map[Severity]int{}
	for _, f := range r.Findings {
		counts[f.Severity]++
	}
	c := r.Summary.Coverage
	scope := fmt.Sprintf("across %s; judged %d of %s, %d of %s",
		plural(r.Summary.Envoys, "envoy"), c.BindingsJudged, plural(c.Bindings, "binding"),
		c.HandshakesJudged, plural(c.Handshakes, "handshake"))
	var line string
	switch {
	case len(r.Findings) == 0 && c.Complete:
		return "clean: 0 findings " + scope
	case len(r.Findings) == 0:
		line = "not clean: 0 findings " + scope
	default:
		var bySev []string
		for _, s := range []Severity{Critical, Warning, Info} {
			if counts[s] > 0 {
				bySev = append(bySev, fmt.Sprintf("%d %s", counts[s], s))
			}
		}
		line = fmt.Sprintf("%s (%s) %s", plural(len(r.Findings), "finding"), strings.Join(bySev, ", "), scope)
	}
	if c.Complete {
		return line
	}
	var gaps []string
	if n := c.Bindings - c.BindingsJudged; n > 0 {
		gaps = append(gaps, plural(n, "binding")+" not judged")
	}
	if n := c.Handshakes - c.HandshakesJudged; n > 0 {
		gaps = append(gaps, plural(n, "handshake")+" without a certificate")
	}
	unbound := 0
	for _, f := range r.Findings {
		if f.Code == Unbound {
			unbound++
		}
	}
	if n := c.Gaps - unbound; n > 0 {
		gaps = append(gaps, plural(n, "input")+" not read")
	}
	if unbound > 0 {
		gaps = append(gaps, plural(unbound, "certificate")+" without a desired source")
	}
	if len(gaps) == 0 {
		return line + "\ncoverage incomplete"
	}
	return line + "\ncoverage incomplete: " + strings.Join(gaps, ", ")
}

// Shortfall says in one line how much of the coverage was judged, for messages about a report
// that is not complete: "judged 3 of 4 bindings and 5 of 6 handshakes, 1 input not read".
func (c Coverage) Shortfall() string {
	return fmt.Sprintf("judged %d of %s and %d of %s, %s not read",
		c.BindingsJudged, plural(c.Bindings, "binding"), c.HandshakesJudged, plural(c.Handshakes, "handshake"), plural(c.Gaps, "input"))
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func shortenFingerprints(s string) string {
	return fingerprintRE.ReplaceAllStringFunc(s, shortFingerprint)
}

// clean makes a string safe for one terminal line: names and messages can come from certificates,
// Envoy responses and error texts, so control characters (newlines, ANSI escapes) are replaced.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		// Format characters include bidi overrides, which can make text read differently.
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' '
		}
		return r
	}, s)
}

// UnmarshalText reads the words MarshalText writes, so that a JSON report (certdrift audit -o
// json) decodes back into a Report. It lives here, next to RenderJSON, because the round trip is
// part of the JSON report's contract.
func (s *Severity) UnmarshalText(b []byte) error {
	v, ok := ParseSeverity(string(b))
	if !ok {
		return fmt.Errorf("unknown severity %q (want info, warning or critical)", truncateText(string(b), 20))
	}
	*s = v
	return nil
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// pick is a ? b : c, for verbs that agree with a plural.
func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}
