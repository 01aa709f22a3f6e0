package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"unicode"
)

// ShortFingerprintLen is how many hex characters of a SHA-256 fingerprint the table shows: 64 bits
// are plenty to tell certificates apart by eye and keep a finding on one line.
const ShortFingerprintLen = 16

// fingerprintRE matches a full SHA-256 fingerprint (64 hex digits) that is not part of a longer
// hex run, so serials and other hex strings are left alone.
var fingerprintRE = regexp.MustCompile(`\b[0-9a-fA-F]{64}\b`)

// RenderTable writes r for people: findings grouped by Envoy (findings without an Envoy under
// their desired source), the group with the worst finding first and, inside a group, the worst
// finding first. Each finding is one line, "SEVERITY CODE subject message", followed by an
// indented advice line; a summary line closes the report so that a clean run is visibly not an
// empty one.
func RenderTable(w io.Writer, r Report) error {
	bw := bufio.NewWriter(w)
	for i, g := range groupFindings(r.Findings) {
		if i > 0 {
			fmt.Fprintln(bw)
		}
		fmt.Fprintf(bw, "%s %s\n", g.kind, clean(g.name))
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
					fmt.Fprintf(bw, "  %-8s %-22s … and %d more like these (-o json lists them all)\n", strings.ToUpper(f.Severity.String()), clean(string(f.Code)), same[k]-collapseAfter)
				}
				continue
			}
			line := fmt.Sprintf("  %-8s %-22s", strings.ToUpper(f.Severity.String()), clean(string(f.Code)))
			if s := subjectText(f.Subject, g.kind); s != "" {
				line += " " + s
			}
			line += " " + clean(shortenFingerprints(f.Message))
			if f.Inferred {
				line += " (binding inferred)"
			}
			fmt.Fprintln(bw, line)
			if f.Advice != "" {
				fmt.Fprintf(bw, "      advice: %s\n", clean(shortenFingerprints(f.Advice)))
			}
		}
	}
	if len(r.Findings) > 0 {
		fmt.Fprintln(bw)
	}
	if len(r.Bindings) > 0 {
		writeBindings(bw, r.Bindings)
		fmt.Fprintln(bw)
	}
	fmt.Fprintln(bw, summaryLine(r))
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write table report: %w", err)
	}
	return nil
}

// collapseAfter is how many findings of one code, severity and subject the table shows before
// folding the rest into one line.
const collapseAfter = 3

func collapseKey(f Finding) string {
	return fmt.Sprintf("%s\x00%d\x00%+v\x00%s", f.Code, f.Severity, f.Subject, f.Advice)
}

// writeBindings lists every binding with its state, so a reader sees what converged next to what
// did not: findings alone cannot tell a healthy Envoy from one that was never checked.
func writeBindings(w io.Writer, bs []Binding) {
	fmt.Fprintln(w, "bindings")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, b := range bs {
		src := b.Source
		if b.Item != "" {
			src += "/" + b.Item
		}
		where := b.Secret
		if where == "" {
			where = b.File
		}
		if where == "" {
			where = "-"
		}
		origin := b.Origin
		if b.Trust {
			origin = "trust, " + origin
		}
		line := fmt.Sprintf("  %s\t%s\t%s\t%s\t(%s)", clean(b.Envoy), clean(src), strings.ToUpper(cmpOr(b.State, StateUnknown)), clean(where), origin)
		if b.Reason != "" {
			line += "\t" + clean(b.Reason)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
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
			parts = append(parts, k+"="+clean(v))
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

func summaryLine(r Report) string {
	counts := map[Severity]int{}
	for _, f := range r.Findings {
		counts[f.Severity]++
	}
	c := r.Summary.Coverage
	scope := fmt.Sprintf("across %s; judged %d of %s, %d of %s",
		plural(r.Summary.Envoys, "envoy"), c.BindingsJudged, plural(c.Bindings, "binding"),
		c.HandshakesJudged, plural(c.Handshakes, "handshake"))
	if !c.Complete {
		scope += "; coverage incomplete"
	}
	if len(r.Findings) == 0 {
		if !c.Complete {
			return "not clean: 0 findings, but not everything could be judged, " + scope
		}
		return "clean: 0 findings " + scope
	}
	var bySev []string
	for _, s := range []Severity{Critical, Warning, Info} {
		if counts[s] > 0 {
			bySev = append(bySev, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	return fmt.Sprintf("%s (%s) %s", plural(len(r.Findings), "finding"), strings.Join(bySev, ", "), scope)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func shortenFingerprints(s string) string {
	return fingerprintRE.ReplaceAllStringFunc(s, func(fp string) string {
		return strings.ToLower(fp[:ShortFingerprintLen])
	})
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
