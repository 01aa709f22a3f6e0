package config

import (
	"errors"
	"fmt"
	"reflect"
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
	Line   int
	Column int    // 0 when unknown
	Field  string // as "envoys[0].endpoints[1].address"
	Msg    string

	unknown bool // an unknown field: validation errors about its mapping are left out (collect)
}

func (e *FieldError) Error() string {
	msg := e.Msg
	if e.Field != "" && !strings.HasPrefix(msg, e.Field) {
		msg = e.Field + ": " + msg
	}
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, msg)
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, msg)
	}
	return msg
}

// FileError is a config file that could not be used: the path once, then its problems (Errors,
// one a line) or the one error that stopped decoding.
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string {
	var es Errors
	if errors.As(e.Err, &es) && len(es) > 1 {
		return fmt.Sprintf("config %s is invalid (%d problems):\n  %s", e.Path, len(es), strings.ReplaceAll(es.Error(), "\n", "\n  "))
	}
	return fmt.Sprintf("config %s is invalid: %s", e.Path, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

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
				e.Field, e.Column = p.path, p.col
				return true
			}
		}
		return false
	}
	if f := notFoundRE.FindStringSubmatch(m[2]); f != nil {
		pick(func(p place) bool { return p.key && p.value == f[1] })
		e.Msg = unknownField(f[1], parent(e.Field))
		e.unknown = true
		return e
	}
	defer func() { e.Msg = humanTypes(e.Msg) }()
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
		e.Field, e.Column = onLine[best].path, onLine[best].col
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
	// A mapping holding a misspelt key ("dri") fails validation for the key it lacks ("set
	// dir"): that second message describes the same typo, so it is left out.
	misspelt := map[string]bool{}
	if decodeErr != nil {
		for _, s := range decodeErr.Errors {
			e := x.decodeError(s)
			out = append(out, e)
			if e.Field != "" {
				bad[e.Field] = true
			}
			if e.unknown {
				misspelt[parent(e.Field)] = true
			}
		}
	}
	for _, err := range splitJoined(validateErr) {
		e := x.validationError(err)
		if related(bad, e.Field) || misspelt[e.Field] {
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

// unknownField says that key is not a field of the mapping at path, with the nearest known key as
// a suggestion: the decoder's own text names a Go type (config.Desired), which means nothing to
// the person editing the file.
func unknownField(key, path string) string {
	known := knownKeys(reflect.TypeFor[Config](), path)
	msg := fmt.Sprintf("unknown field %q", key)
	if s := suggest(key, known); s != "" {
		return msg + fmt.Sprintf("; did you mean %q?", s)
	}
	if len(known) > 0 {
		return msg + "; known fields here: " + strings.Join(known, ", ")
	}
	return msg
}

// knownKeys lists the YAML keys of the mapping at path ("desired[0]", "policy", "" for the top).
func knownKeys(t reflect.Type, path string) []string {
	for _, seg := range strings.Split(path, ".") {
		if seg == "" {
			continue
		}
		if i := strings.Index(seg, "["); i >= 0 {
			seg = seg[:i]
		}
		t = elem(t)
		if t.Kind() != reflect.Struct {
			return nil
		}
		found := false
		for i := range t.NumField() {
			if yamlKey(t.Field(i)) == seg {
				t, found = t.Field(i).Type, true
				break
			}
		}
		if !found {
			return nil
		}
	}
	t = elem(t)
	if t.Kind() != reflect.Struct {
		return nil
	}
	var keys []string
	for i := range t.NumField() {
		if k := yamlKey(t.Field(i)); k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}

// elem strips pointers and slices: desired[0] is a Desired, merged a Merged.
func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t
}

func yamlKey(f reflect.StructField) string {
	k, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return k
}

// suggest is the known key nearest to key, if it is near enough to be a typo: at most two edits
// (a swap of neighbours is one), and fewer than half of key's letters.
func suggest(key string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(key, k); d < bestD && 2*d < len([]rune(key))+1 {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance: insertions, deletions, substitutions
// and swaps of adjacent letters each cost one.
func editDistance(a, b string) int {
	s, t := []rune(a), []rune(b)
	d := make([][]int, len(s)+1)
	for i := range d {
		d[i] = make([]int, len(t)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(s); i++ {
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(s)][len(t)]
}

var unmarshalRE = regexp.MustCompile("cannot unmarshal !!(\\w+) (?:(`[^`]*`) )?into (\\S+)")

// humanTypes rewrites yaml.v3's "cannot unmarshal !!seq into string" into what the file needs
// ("want a string, got a list"): Go and YAML tag names are not the reader's vocabulary.
func humanTypes(msg string) string {
	return unmarshalRE.ReplaceAllStringFunc(msg, func(m string) string {
		p := unmarshalRE.FindStringSubmatch(m)
		got := map[string]string{"seq": "a list", "map": "a mapping", "str": "the text", "int": "the number",
			"float": "the number", "bool": "the boolean", "null": "nothing", "timestamp": "the time"}[p[1]]
		if got == "" {
			got = "a value"
		}
		if p[2] != "" && (p[1] == "str" || p[1] == "int" || p[1] == "float" || p[1] == "bool" || p[1] == "timestamp") {
			got += ` "` + strings.Trim(p[2], "`") + `"`
		} else if strings.HasPrefix(got, "the ") {
			got = "a " + strings.TrimPrefix(got, "the ")
		}
		return "want " + goTypeName(p[3]) + ", got " + got
	})
}

func goTypeName(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a mapping"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint") || strings.HasPrefix(t, "float"):
		return "a number"
	}
	return "a mapping (key: value)"
}
