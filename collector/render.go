package collector

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The one render path. Every series certdrift exposes is rendered here, once, as a text line
// (text/plain 0.0.4); the protobuf Metric of the delimited MetricFamily format, which only
// Prometheus servers with native histograms enabled ask for, is derived from that line when a
// protobuf scrape needs it (protoRows), except for histograms, whose few series keep both forms.
// Keeping only the text halves what the rows hold: at 10,000 Secrets the protobuf rows were
// 4.8 MB of a 37 MB live heap. A scrape of either format only concatenates rows: HELP and TYPE
// once per family, then every object's rows of that family. A protobuf MetricFamily can be concatenated
// the same way, because repeated fields of a message arriving in several pieces are appended
// (protobuf encoding, "Last One Wins" does not apply to repeated fields), so an object's Metric
// fields are valid wherever in the family they land.
//
// A label whose value is empty is not written, in either format: Prometheus stores `envoy=""` and
// no envoy label as the same series (it drops empty labels on ingestion), so the pair is only
// bytes. Each view has its own label set besides (a desired certificate has no envoy or sni at
// all), which is why one family may hold series with different label names: both formats allow
// it, and Prometheus ingests it.

// metricFamily is one metric family: its name, help, type, and its header in both formats.
type metricFamily struct {
	name, help string
	typ        dto.MetricType
	// id indexes allFamilies.
	id int
	// labels are every label name the family's series may carry (each view its own subset),
	// sorted: what docs/metrics.md lists.
	labels []string
	// textHeader is "# HELP ...\n# TYPE ...\n"; protoHeader the MetricFamily's name, help and
	// type fields.
	textHeader, protoHeader []byte
}

// allFamilies are every family the package declares, in declaration order.
var allFamilies []*metricFamily

// newFamily declares a family; only package-level variables call it.
func newFamily(name, help string, typ dto.MetricType, sets ...labels) *metricFamily {
	f := &metricFamily{name: name, help: help, typ: typ, id: len(allFamilies)}
	for _, set := range sets {
		for _, n := range set {
			if !slices.Contains(f.labels, n) {
				f.labels = append(f.labels, n)
			}
		}
	}
	slices.Sort(f.labels)
	allFamilies = append(allFamilies, f)
	var b []byte
	b = append(b, "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, helpEscaper.Replace(help)...)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, strings.ToLower(typ.String())...)
	b = append(b, '\n')
	f.textHeader = b
	p := protowire.AppendTag(nil, 1, protowire.BytesType)
	p = protowire.AppendString(p, name)
	p = protowire.AppendTag(p, 2, protowire.BytesType)
	p = protowire.AppendString(p, help)
	p = protowire.AppendTag(p, 3, protowire.VarintType)
	p = protowire.AppendVarint(p, uint64(typ))
	f.protoHeader = p
	return f
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// labels is a label set: names in the order they are written, which is sorted (as client_golang
// sorts const metrics' labels, so the text is the same).
type labels []string

func labelSet(names ...string) labels {
	l := labels(slices.Clone(names))
	slices.Sort(l)
	return l
}

// rows are rendered series of one family: text lines and, for a histogram family only,
// protobuf Metric fields (each a MetricFamily field 4, ready to be concatenated into a family);
// protoRows gives the protobuf form of any family.
type rows struct {
	f           *metricFamily
	text, proto []byte
}

// rowSet collects the rows of one object (or of one scrape's live part), by family.
type rowSet struct {
	rows []rows
}

// of returns the rows of f, adding them at the end.
func (s *rowSet) of(f *metricFamily) *rows {
	for i := range s.rows {
		if s.rows[i].f == f {
			return &s.rows[i]
		}
	}
	s.rows = append(s.rows, rows{f: f})
	return &s.rows[len(s.rows)-1]
}

// sample renders one gauge or counter series. values are in names' order; len(values) must be
// len(names).
func (s *rowSet) sample(f *metricFamily, names labels, values []string, v float64) {
	r := s.of(f)
	r.text = appendTextSample(r.text, f.name, "", names, values, "", v)
}

// histogram renders one histogram series from cumulative bucket counts.
func (s *rowSet) histogram(f *metricFamily, names labels, values []string, h histogram) {
	r := s.of(f)
	cum := h.cumulativeCounts()
	for i, b := range h.bounds {
		r.text = appendTextSample(r.text, f.name, "_bucket", names, values, strconv.FormatFloat(b, 'g', -1, 64), float64(cum[i]))
	}
	if len(h.bounds) == 0 || !math.IsInf(h.bounds[len(h.bounds)-1], +1) {
		r.text = appendTextSample(r.text, f.name, "_bucket", names, values, "+Inf", float64(h.count))
	}
	r.text = appendTextSample(r.text, f.name, "_sum", names, values, "", h.sum)
	r.text = appendTextSample(r.text, f.name, "_count", names, values, "", float64(h.count))

	m := &dto.Metric{Label: labelPairs(names, values), Histogram: &dto.Histogram{
		SampleCount: proto.Uint64(h.count), SampleSum: proto.Float64(h.sum)}}
	for i, b := range h.bounds {
		m.Histogram.Bucket = append(m.Histogram.Bucket, &dto.Bucket{CumulativeCount: proto.Uint64(cum[i]), UpperBound: proto.Float64(b)})
	}
	body, err := proto.Marshal(m)
	if err != nil {
		// A Metric of plain numbers and valid UTF-8 always marshals.
		panic("collector: marshal histogram: " + err.Error())
	}
	r.proto = protowire.AppendTag(r.proto, 4, protowire.BytesType)
	r.proto = protowire.AppendBytes(r.proto, body)
}

func labelPairs(names labels, values []string) []*dto.LabelPair {
	var out []*dto.LabelPair
	for i, n := range names {
		if values[i] == "" {
			continue
		}
		out = append(out, &dto.LabelPair{Name: proto.String(n), Value: proto.String(validUTF8(values[i]))})
	}
	return out
}

// appendTextSample appends `name<suffix>{labels[,le="le"]} value\n`, leaving out empty labels.
func appendTextSample(b []byte, name, suffix string, names labels, values []string, le string, v float64) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	sep := byte('{')
	for i, n := range names {
		if values[i] == "" {
			continue
		}
		b = append(b, sep)
		b = append(b, n...)
		b = append(b, '=', '"')
		b = appendEscaped(b, validUTF8(values[i]))
		b = append(b, '"')
		sep = ','
	}
	if le != "" {
		b = append(b, sep)
		b = append(b, `le="`...)
		b = append(b, le...)
		b = append(b, '"')
		sep = ','
	}
	if sep == ',' {
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = appendFloat(b, v)
	return append(b, '\n')
}

func appendEscaped(b []byte, v string) []byte {
	if !strings.ContainsAny(v, "\\\n\"") {
		return append(b, v...)
	}
	return append(b, valueEscaper.Replace(v)...)
}

// appendFloat writes a value as the text format does (expfmt's writeFloat).
func appendFloat(b []byte, f float64) []byte {
	switch {
	case f == 1:
		return append(b, '1')
	case f == 0:
		return append(b, '0')
	case f == -1:
		return append(b, "-1"...)
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, +1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// appendProtoSample appends one Metric (MetricFamily field 4) holding a gauge or counter.
func appendProtoSample(b []byte, typ dto.MetricType, names labels, values []string, v float64) []byte {
	// The Metric's size first: field 4 is length-delimited.
	size := 0
	for i, n := range names {
		if values[i] == "" {
			continue
		}
		size += protowire.SizeTag(1) + protowire.SizeBytes(labelPairSize(n, validUTF8(values[i])))
	}
	valueMsg := protowire.SizeTag(1) + protowire.SizeFixed64() // Gauge{value} / Counter{value}
	size += protowire.SizeTag(2) + protowire.SizeBytes(valueMsg)
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	for i, n := range names {
		if values[i] == "" {
			continue
		}
		v := validUTF8(values[i])
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(labelPairSize(n, v)))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, n)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	field := protowire.Number(2) // gauge
	if typ == dto.MetricType_COUNTER {
		field = 3
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(valueMsg))
	b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

func labelPairSize(name, value string) int {
	return protowire.SizeTag(1) + protowire.SizeBytes(len(name)) + protowire.SizeTag(2) + protowire.SizeBytes(len(value))
}

// validUTF8 keeps label values valid UTF-8, which both formats require (a protobuf string that is
// not is a decoding error for the whole scrape).
func validUTF8(v string) string {
	if utf8.ValidString(v) {
		return v
	}
	return strings.ToValidUTF8(v, "\uFFFD")
}

// labelIndex places label values by name into a label set's (sorted) order.
type labelIndex struct {
	names labels
	pos   map[string]int
}

func newLabelIndex(names ...string) *labelIndex {
	l := &labelIndex{names: labelSet(names...), pos: map[string]int{}}
	for i, n := range l.names {
		l.pos[n] = i
	}
	return l
}

// values takes name, value pairs (every name of the set, in any order) and returns the values in
// the set's order.
func (l *labelIndex) values(kv ...string) []string {
	if len(kv) != 2*len(l.names) {
		panic("collector: label values do not match the label set " + strings.Join(l.names, ","))
	}
	out := make([]string, len(l.names))
	for i := 0; i < len(kv); i += 2 {
		p, ok := l.pos[kv[i]]
		if !ok {
			panic("collector: label " + kv[i] + " is not in the set " + strings.Join(l.names, ","))
		}
		out[p] = kv[i+1]
	}
	return out
}

// protoRows appends the protobuf Metric fields of r to dst: a histogram's as rendered, a gauge's
// or counter's parsed back from its text lines, which this file wrote (appendTextSample: label
// values escaped, empty ones left out, floats as strconv's shortest form, so the values come back
// bit for bit). An error means a line this package did not write; the rows before it are kept.
func (r *rows) protoRows(dst []byte) ([]byte, error) {
	if r.f.typ == dto.MetricType_HISTOGRAM {
		return append(dst, r.proto...), nil
	}
	var names labels
	var values []string
	text := r.text
	for len(text) > 0 {
		line, rest, ok := bytes.Cut(text, []byte{'\n'})
		if !ok {
			return dst, fmt.Errorf("family %s: row without its newline", r.f.name)
		}
		text = rest
		names, values = names[:0], values[:0]
		v, err := parseTextSample(line, r.f.name, &names, &values)
		if err != nil {
			return dst, fmt.Errorf("family %s: %w", r.f.name, err)
		}
		dst = appendProtoSample(dst, r.f.typ, names, values, v)
	}
	return dst, nil
}

// parseTextSample reads back one line appendTextSample wrote for a gauge or counter:
// `name{l1="v1",l2="v2"} value`.
func parseTextSample(line []byte, name string, names *labels, values *[]string) (float64, error) {
	rest, ok := bytes.CutPrefix(line, []byte(name))
	if !ok {
		return 0, fmt.Errorf("row %q is not of this family", line)
	}
	if len(rest) > 0 && rest[0] == '{' {
		rest = rest[1:]
		for {
			eq := bytes.IndexByte(rest, '=')
			if eq <= 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
				return 0, fmt.Errorf("row %q: label without a quoted value", line)
			}
			*names = append(*names, string(rest[:eq]))
			rest = rest[eq+2:]
			var val []byte
			closed := false
			for i := 0; i < len(rest); i++ {
				c := rest[i]
				if c == '"' {
					rest, closed = rest[i+1:], true
					break
				}
				if c == '\\' && i+1 < len(rest) {
					i++
					switch rest[i] {
					case 'n':
						c = '\n'
					default: // \\ and \"
						c = rest[i]
					}
				}
				val = append(val, c)
			}
			if !closed {
				return 0, fmt.Errorf("row %q: unterminated label value", line)
			}
			*values = append(*values, string(val))
			if len(rest) > 0 && rest[0] == ',' {
				rest = rest[1:]
				continue
			}
			if len(rest) > 0 && rest[0] == '}' {
				rest = rest[1:]
				break
			}
			return 0, fmt.Errorf("row %q: label set not closed", line)
		}
	}
	num, ok := bytes.CutPrefix(rest, []byte{' '})
	if !ok {
		return 0, fmt.Errorf("row %q: no value", line)
	}
	v, err := strconv.ParseFloat(string(num), 64)
	if err != nil {
		return 0, fmt.Errorf("row %q: value: %w", line, err)
	}
	return v, nil
}
