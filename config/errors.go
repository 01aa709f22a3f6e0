package config

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// FieldError is one problem in the file, placed by line and field so a person can go straight
// to it. Line is 0 when the field is absent from the file (a required field left out, placed at
// its nearest written parent when there is one).
type FieldError struct {
	Line  int
	Field string // as "envoys[0].endpoints[1].address"
	Msg   string
}

func (e *FieldError) Error() string {
	msg := e.Msg
	if e.Field != "" && !strings.HasPrefix(msg, e.Field) {
		msg = e.Field + ": " + msg
	}
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, msg)
	}
	return msg
}

// Errors is every problem found in one file, in line order: decoding goes on past a bad value
// (a wrong type, a bad duration, an unknown field) and validation runs on what was decoded, so
// one pass shows them all.
type Errors []*FieldError

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap lets errors.As find each FieldError.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// place is one node of the file: a key, a scalar value, or a mapping/sequence.
type place struct {
	line, col int
	path      string
	value     string
	key       bool
	container bool
}

// fileIndex maps the file's nodes to field paths, to name the field behind a "line N" decoder
// message and the line behind a validation message.
type fileIndex struct {
	places []place
	lines  map[string]int
}

func indexFile(root *yaml.Node) *fileIndex {
	x := &fileIndex{lines: map[string]int{}}
	if root != nil && root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		x.walk(root.Content[0], "")
	}
	return x
}

func (x *fileIndex) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		if path != "" {
			x.places = append(x.places, place{line: n.Line, col: n.Column, path: path, container: true})
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			x.lines[p] = k.Line
			x.places = append(x.places, place{line: k.Line, col: k.Column, path: p, value: k.Value, key: true})
			x.walk(v, p)
		}
	case yaml.SequenceNode:
		x.places = append(x.places, place{line: n.Line, col: n.Column, path: path, container: true})
		for j, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, j)
			x.lines[p] = item.Line
			x.walk(item, p)
		}
	case yaml.ScalarNode:
		x.places = append(x.places, place{line: n.Line, col: n.Column, path: path, value: n.Value})
	}
}

var (
	lineRE     = regexp.MustCompile(`^line (\d+): (.*)$`)
	notFoundRE = regexp.MustCompile(`field (\S+) not found in type`)
	quotedRE   = regexp.MustCompile("`([^`]*)`|\"((?:[^\"\\\\]|\\\\.)*)\"")
	pathRE     = regexp.MustCompile(`^[a-z_]+(?:\[\d+\])?(?:\.[a-z_]+(?:\[\d+\])?)*`)
)

// decodeError places one "line N: ..." message of the decoder (yaml.v3's or Duration's).
func (x *fileIndex) decodeError(s string) *FieldError {
	m := lineRE.FindStringSubmatch(s)
	if m == nil {
		return &FieldError{Msg: s}
	}
	line, _ := strconv.Atoi(m[1])
	e := &FieldError{Line: line, Msg: m[2]}
	var onLine []place
	for _, p := range x.places {
		if p.line == line {
			onLine = append(onLine, p)
		}
	}
	pick := func(ok func(place) bool) bool {
		for _, p := range onLine {
			if ok(p) {
				e.Field = p.path
				return true
			}
		}
		return false
	}
	if f := notFoundRE.FindStringSubmatch(m[2]); f != nil && pick(func(p place) bool { return p.key && p.value == f[1] }) {
		return e
	}
	for _, q := range quotedRE.FindAllStringSubmatch(m[2], -1) {
		v := q[1] + q[2]
		// yaml.v3 shortens long values to their first 7 characters and "...".
		short := strings.TrimSuffix(v, "...")
		if pick(func(p place) bool {
			return !p.key && !p.container && (p.value == v || (short != v && strings.HasPrefix(p.value, short)))
		}) {
			return e
		}
	}
	// A mapping or list where a scalar belongs: the innermost one starting on the line.
	best := -1
	for i, p := range onLine {
		if p.container && (best < 0 || p.col > onLine[best].col) {
			best = i
		}
	}
	if best >= 0 {
		e.Field = onLine[best].path
		return e
	}
	pick(func(p place) bool { return !p.key && !p.container })
	return e
}

// validationError places a message of Validate, which starts with the field's path.
func (x *fileIndex) validationError(err error) *FieldError {
	s := err.Error()
	path := pathRE.FindString(s)
	e := &FieldError{Field: path, Msg: s}
	for p := path; p != ""; p = parent(p) {
		if l, ok := x.lines[p]; ok {
			e.Line = l
			break
		}
	}
	return e
}

// parent is the path one level up: "a.b[2]" → "a.b", "a.b" → "a".
func parent(p string) string {
	if i := strings.LastIndex(p, "["); i >= 0 && strings.HasSuffix(p, "]") {
		return p[:i]
	}
	if i := strings.LastIndex(p, "."); i >= 0 {
		return p[:i]
	}
	return ""
}

// collect merges the decoder's and the validation's errors in line order. A validation message
// about a field that already failed to decode (or one inside it) is left out: it would only
// describe the zero value the bad one left behind.
func (x *fileIndex) collect(decodeErr *yaml.TypeError, validateErr error) error {
	var out Errors
	bad := map[string]bool{}
	if decodeErr != nil {
		for _, s := range decodeErr.Errors {
			e := x.decodeError(s)
			out = append(out, e)
			if e.Field != "" {
				bad[e.Field] = true
			}
		}
	}
	for _, err := range splitJoined(validateErr) {
		e := x.validationError(err)
		if related(bad, e.Field) {
			continue
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

func related(bad map[string]bool, field string) bool {
	for p := field; p != ""; p = parent(p) {
		if bad[p] {
			return true
		}
	}
	return false
}

func splitJoined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
