// Package metricnames checks PromQL expressions in certdrift's shipped alerts and dashboards
// against docs/metrics.md: every metric an expression selects must be documented there, every
// label it matches or groups by must be one the metric carries, and every finding code it
// matches must exist in docs/findings.md. The point is that renaming a metric or a label in the
// exporter breaks a test here instead of silently breaking a page or a panel.
//
// Why a tokenizer and not a parser: the PromQL parser lives in github.com/prometheus/prometheus,
// which is not in go.mod and is too heavy a module to add for a test. PromQL's lexical structure
// is small, so a tokenizer that knows strings, label matchers, ranges, numbers/durations, the
// function and aggregation names and the keywords can classify every identifier reliably:
// an identifier is a function when it is followed by "(" (and must then be a known function,
// so a typo or an unknown name fails instead of passing), a keyword when it is one of PromQL's
// few keywords (whose label lists are read as labels), and otherwise a metric name. Anything
// it does not understand is an error, never a silent pass.
package metricnames

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// Selector is one vector selector of an expression: a metric name and its label matchers.
type Selector struct {
	Metric   string
	Matchers []Matcher
}

// Matcher is one label matcher of a selector.
type Matcher struct {
	Label, Op, Value string
}

// Parsed is what an expression uses.
type Parsed struct {
	Selectors []Selector
	// Grouping holds the labels of by/without/on/ignoring/group_left/group_right clauses.
	Grouping []string
}

// Metrics returns the distinct metric names an expression selects, sorted.
func (p Parsed) Metrics() []string {
	var out []string
	for _, s := range p.Selectors {
		if !slices.Contains(out, s.Metric) {
			out = append(out, s.Metric)
		}
	}
	sort.Strings(out)
	return out
}

// functions are PromQL's functions and aggregation operators (Prometheus 2.x and 3.x), plus
// start/end for the @ modifier.
var functions = set(`abs absent absent_over_time acos acosh asin asinh atan atanh avg avg_over_time
	bottomk ceil changes clamp clamp_max clamp_min cos cosh count count_over_time count_values
	day_of_month day_of_week day_of_year days_in_month deg delta deriv double_exponential_smoothing
	end exp floor group histogram_avg histogram_count histogram_fraction histogram_quantile
	histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase info irate
	label_join label_replace last_over_time limit_ratio limitk ln log10 log2 mad_over_time max
	max_over_time min min_over_time minute month pi predict_linear present_over_time quantile
	quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_by_label
	sort_by_label_desc sort_desc sqrt start stddev stddev_over_time stdvar stdvar_over_time sum
	sum_over_time tan tanh time timestamp topk vector year`)

// aggregations may put their by/without clause between their name and their argument.
var aggregations = set(`avg bottomk count count_values group limit_ratio limitk max min quantile stddev stdvar sum topk`)

// keywords are PromQL's reserved words; the grouping ones are followed by a label list.
var (
	keywords = set(`and or unless by without on ignoring group_left group_right offset bool inf nan`)
	grouping = set(`by without on ignoring group_left group_right`)
)

func set(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

type tokKind int

const (
	tIdent tokKind = iota
	tString
	tNumber
	tMatchers // a {...} block, already parsed
	tRange    // a [...] block
	tVar      // a Grafana template variable ($x, ${x}, [[x]])
	tPunct
)

type token struct {
	kind     tokKind
	text     string
	matchers []Matcher
	pos      int
}

// Parse reads an expression. Grafana template variables ($namespace, ${x}, $__rate_interval)
// are accepted where a value may stand; they never name a metric.
func Parse(expr string) (Parsed, error) {
	toks, err := tokenize(expr)
	if err != nil {
		return Parsed{}, err
	}
	var p Parsed
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.kind {
		case tMatchers:
			// A selector without a metric name ({__name__=...} or {job="x"}) cannot be checked
			// against the documentation: refuse it.
			return Parsed{}, fmt.Errorf("offset %d: selector %s has no metric name", t.pos, t.text)
		case tIdent:
		default:
			continue
		}
		name := t.text
		next := func(k int) *token {
			if i+k < len(toks) {
				return &toks[i+k]
			}
			return nil
		}
		lower := strings.ToLower(name)
		switch {
		case grouping[lower]:
			if n := next(1); n != nil && n.kind == tPunct && n.text == "(" {
				j := i + 2
				for ; j < len(toks) && !(toks[j].kind == tPunct && toks[j].text == ")"); j++ {
					switch {
					case toks[j].kind == tIdent:
						p.Grouping = append(p.Grouping, toks[j].text)
					case toks[j].kind == tPunct && toks[j].text == ",":
					default:
						return Parsed{}, fmt.Errorf("offset %d: unexpected %q in %s (...)", toks[j].pos, toks[j].text, name)
					}
				}
				if j == len(toks) {
					return Parsed{}, fmt.Errorf("offset %d: %s ( is not closed", t.pos, name)
				}
				i = j
			} else if lower != "group_left" && lower != "group_right" {
				return Parsed{}, fmt.Errorf("offset %d: %s without a label list", t.pos, name)
			}
		case keywords[lower]:
		default:
			if n := next(1); n != nil && n.kind == tIdent && aggregations[name] && (strings.EqualFold(n.text, "by") || strings.EqualFold(n.text, "without")) {
				continue // sum by (x) (...): the aggregation, its clause comes next
			}
			if n := next(1); n != nil && n.kind == tPunct && n.text == "(" {
				if !functions[name] {
					return Parsed{}, fmt.Errorf("offset %d: unknown function %q", t.pos, name)
				}
				continue
			}
			sel := Selector{Metric: name}
			if n := next(1); n != nil && n.kind == tMatchers {
				sel.Matchers = n.matchers
				i++
			}
			p.Selectors = append(p.Selectors, sel)
		}
	}
	return p, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdent(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func tokenize(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			str, n, err := readString(s, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{kind: tString, text: str, pos: i})
			i += n
		case c == '[' && strings.HasPrefix(s[i:], "[["):
			end := strings.Index(s[i:], "]]")
			if end < 0 {
				return nil, fmt.Errorf("offset %d: [[ is not closed", i)
			}
			toks = append(toks, token{kind: tVar, text: s[i : i+end+2], pos: i})
			i += end + 2
		case c == '[':
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("offset %d: [ is not closed", i)
			}
			toks = append(toks, token{kind: tRange, text: s[i : i+end+1], pos: i})
			i += end + 1
		case c == '{':
			ms, n, err := readMatchers(s, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{kind: tMatchers, text: s[i : i+n], matchers: ms, pos: i})
			i += n
		case c == '$':
			j := i + 1
			if j < len(s) && s[j] == '{' {
				end := strings.IndexByte(s[j:], '}')
				if end < 0 {
					return nil, fmt.Errorf("offset %d: ${ is not closed", i)
				}
				j += end + 1
			} else {
				for j < len(s) && isIdent(s[j]) {
					j++
				}
			}
			if j == i+1 {
				return nil, fmt.Errorf("offset %d: lone $", i)
			}
			toks = append(toks, token{kind: tVar, text: s[i:j], pos: i})
			i = j
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			// Numbers, hex, exponents and durations (5m, 1h30m) are one token: a duration's
			// unit must not read as a metric name.
			j := i
			for j < len(s) && (isIdent(s[j]) || s[j] == '.' ||
				((s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E') && !strings.HasPrefix(strings.ToLower(s[i:]), "0x"))) {
				j++
			}
			toks = append(toks, token{kind: tNumber, text: s[i:j], pos: i})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			toks = append(toks, token{kind: tIdent, text: s[i:j], pos: i})
			i = j
		case strings.ContainsRune("()+-*/%^=!<>,@", rune(c)):
			toks = append(toks, token{kind: tPunct, text: string(c), pos: i})
			i++
		default:
			return nil, fmt.Errorf("offset %d: unexpected character %q", i, c)
		}
	}
	return toks, nil
}

// readString reads a quoted string at s[i] and returns its content and length in s.
func readString(s string, i int) (string, int, error) {
	q := s[i]
	var b strings.Builder
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`' && j+1 < len(s):
			b.WriteByte(s[j+1])
			j++
		case s[j] == q:
			return b.String(), j + 1 - i, nil
		default:
			b.WriteByte(s[j])
		}
	}
	return "", 0, fmt.Errorf("offset %d: string is not closed", i)
}

// readMatchers reads {label op "value", ...} at s[i].
func readMatchers(s string, i int) ([]Matcher, int, error) {
	var ms []Matcher
	j := i + 1
	skip := func() {
		for j < len(s) && strings.IndexByte(" \t\n\r", s[j]) >= 0 {
			j++
		}
	}
	for {
		skip()
		if j >= len(s) {
			return nil, 0, fmt.Errorf("offset %d: { is not closed", i)
		}
		if s[j] == '}' {
			return ms, j + 1 - i, nil
		}
		start := j
		for j < len(s) && isIdent(s[j]) {
			j++
		}
		if start == j {
			return nil, 0, fmt.Errorf("offset %d: expected a label name in matchers", j)
		}
		m := Matcher{Label: s[start:j]}
		skip()
		for _, op := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(s[j:], op) {
				m.Op = op
				j += len(op)
				break
			}
		}
		if m.Op == "" {
			return nil, 0, fmt.Errorf("offset %d: expected a matcher operator after %q", j, m.Label)
		}
		skip()
		if j >= len(s) || strings.IndexByte("\"'`", s[j]) < 0 {
			return nil, 0, fmt.Errorf("offset %d: expected a quoted value for %q", j, m.Label)
		}
		v, n, err := readString(s, j)
		if err != nil {
			return nil, 0, err
		}
		m.Value = v
		j += n
		ms = append(ms, m)
		skip()
		if j < len(s) && s[j] == ',' {
			j++
		}
	}
}

// Metric is one documented metric.
type Metric struct {
	Type   string
	Labels []string
}

// Doc is docs/metrics.md as data.
type Doc map[string]Metric

// ReadDoc reads the rows "| `name` | type | labels | meaning |" of docs/metrics.md, the same
// table format collector/docs_test.go holds the code to.
func ReadDoc(r io.Reader) (Doc, error) {
	doc := Doc{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		l := sc.Text()
		if !strings.HasPrefix(l, "| `certdrift_") {
			continue
		}
		cells := strings.Split(l, "|")
		if len(cells) < 5 {
			return nil, fmt.Errorf("line %d: malformed metric row", line)
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var labels []string
		for _, lb := range strings.Split(cells[3], ",") {
			if lb = strings.TrimSpace(lb); lb != "" && lb != "—" {
				labels = append(labels, lb)
			}
		}
		doc[name] = Metric{Type: strings.TrimSpace(cells[2]), Labels: labels}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(doc) == 0 {
		return nil, fmt.Errorf("no metric rows found")
	}
	return doc, nil
}

// TargetLabels are added by Prometheus to every scraped series.
var TargetLabels = []string{"job", "instance"}

// Resolve maps a selected series name to its documented metric and the labels it carries:
// a histogram's _bucket (with le), _sum and _count are its documented name.
func (d Doc) Resolve(name string) (string, []string, bool) {
	if m, ok := d[name]; ok {
		return name, m.Labels, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		if m, ok := d[base]; ok && (m.Type == "histogram" || (m.Type == "summary" && suf != "_bucket")) {
			if suf == "_bucket" {
				return base, append(slices.Clone(m.Labels), "le"), true
			}
			return base, m.Labels, true
		}
	}
	return "", nil, false
}

// Check parses expr and returns every way it departs from the documentation: undocumented
// metrics, matchers on labels the metric does not carry, grouping by labels no selected metric
// carries, and finding codes (code="X", code=~"X|Y", or the same after != and !~, on
// certdrift_finding) not in codes.
func (d Doc) Check(expr string, codes map[string]bool) []error {
	p, err := Parse(expr)
	if err != nil {
		return []error{err}
	}
	var errs []error
	if len(p.Selectors) == 0 {
		errs = append(errs, fmt.Errorf("selects no metric"))
	}
	known := slices.Clone(TargetLabels)
	for _, s := range p.Selectors {
		_, labels, ok := d.Resolve(s.Metric)
		if !ok {
			errs = append(errs, fmt.Errorf("metric %s is not documented in docs/metrics.md", s.Metric))
			continue
		}
		known = append(known, labels...)
		for _, m := range s.Matchers {
			if !slices.Contains(labels, m.Label) && !slices.Contains(TargetLabels, m.Label) {
				errs = append(errs, fmt.Errorf("%s has no label %q (documented: %s)", s.Metric, m.Label, strings.Join(labels, ", ")))
			}
			// Negative matchers too: a misspelt code in an exclusion list (a catch-all's
			// code!~"A|B") would silently include the code it meant to leave out.
			if s.Metric == "certdrift_finding" && m.Label == "code" && !strings.HasPrefix(m.Value, "$") {
				for _, c := range strings.Split(m.Value, "|") {
					if !codes[c] {
						errs = append(errs, fmt.Errorf("finding code %q is not in docs/findings.md", c))
					}
				}
			}
		}
	}
	for _, g := range p.Grouping {
		if !slices.Contains(known, g) {
			errs = append(errs, fmt.Errorf("groups by %q, which no selected metric carries", g))
		}
	}
	return errs
}

// ReadCodes reads the finding codes of docs/findings.md: its "## CODE" headings.
func ReadCodes(r io.Reader) (map[string]bool, error) {
	codes := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		h, ok := strings.CutPrefix(sc.Text(), "## ")
		if ok && h != "" && strings.ToUpper(h) == h && !strings.ContainsAny(h, " `") {
			codes[h] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(codes) == 0 {
		return nil, fmt.Errorf("no finding codes found")
	}
	return codes, nil
}
