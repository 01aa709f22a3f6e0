package collector

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/protowire"
)

// exposition is the objects of one generation, assembled by family: a scrape writes each
// family's header and then its rows, object by object. It is immutable; a writer assembles the
// next one and swaps it in.
type exposition struct {
	fams []expFamily
	// gz is the whole text of fams as gzip members, one per chunk: gzip members concatenate
	// (RFC 1952, section 2.2), so a scrape sends it followed by a fresh member for the live
	// part. Prometheus always asks for gzip, and compressing 4 MB per scrape would be most of
	// its cost; chunks unchanged since the last generation are copied, not compressed again.
	gz []byte
	// chunks are gz's members, by family id (see gzChunkRows).
	chunks [][]gzChunk
	// compressed counts the chunks this generation compressed rather than copied.
	compressed int
	// textSize is the length of the text before compression.
	textSize int
	// protoGz is the protobuf form of fams as one gzip member, made by the first gzipped
	// protobuf scrape of this generation: only Prometheus servers with native histograms on ask
	// for protobuf, so the text's is the one made eagerly.
	protoGzOnce sync.Once
	protoGz     []byte
}

func (e *exposition) protoGzip(bad func(error)) []byte {
	e.protoGzOnce.Do(func() {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		bw := bufio.NewWriterSize(zw, 32<<10)
		_ = e.writeProto(bw, bad)
		_ = bw.Flush()
		_ = zw.Close()
		e.protoGz = gz.Bytes()
	})
	return e.protoGz
}

type expFamily struct {
	f *metricFamily
	// rows are the family's rows of every object, in object order (shared with the objects).
	rows []*rows
}

// gzChunkRows is how many objects' rows of one family share a gzip member: tens of KB of text,
// which compresses within a few percent of one member, while one Secret's change between rounds
// (UpdateDesired) compresses its chunks again and copies the rest. At 100,000 Secrets the text is
// 36 MB, and compressing all of it put hundreds of milliseconds between a Secret's update and its
// series (issue 20: update → metric ≤ 1 s).
const gzChunkRows = 256

// gzChunk is one gzip member of an exposition: the text of rows (the family's header first when
// it is the family's first chunk). rows are immutable once rendered, so the same pointers are the
// same text.
type gzChunk struct {
	rows []*rows
	gz   []byte // a slice of its exposition's gz
}

// gzWriters recycles gzip writers (each holds ≈ 800 KB of compressor state).
var gzWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

// assemble builds the exposition of objs, in family name order and, within a family, object
// order. The rows are shared with the objects, not copied. prev (nil for none) is the exposition
// it replaces: its gzip members whose rows are unchanged are reused.
func assemble(objs objects, prev *exposition) *exposition {
	byID := make([]*expFamily, len(allFamilies))
	for _, o := range objs {
		for i := range o.rows {
			r := &o.rows[i]
			ef := byID[r.f.id]
			if ef == nil {
				ef = &expFamily{f: r.f}
				byID[r.f.id] = ef
			}
			ef.rows = append(ef.rows, r)
		}
	}
	exp := &exposition{}
	for _, ef := range byID {
		if ef != nil {
			exp.fams = append(exp.fams, *ef)
		}
	}
	slices.SortFunc(exp.fams, func(a, b expFamily) int { return strings.Compare(a.f.name, b.f.name) })
	exp.compress(prev)
	return exp
}

// compress makes e.gz, chunk by chunk, copying each chunk of prev whose rows are the same.
func (e *exposition) compress(prev *exposition) {
	var gz bytes.Buffer
	if prev != nil {
		gz.Grow(len(prev.gz))
	}
	e.chunks = make([][]gzChunk, len(allFamilies))
	zw := gzWriters.Get().(*gzip.Writer)
	defer func() {
		zw.Reset(io.Discard) // a pooled writer must not keep this exposition's gz reachable
		gzWriters.Put(zw)
	}()
	type span struct{ id, i, from, to int }
	var spans []span // where each chunk's member lies in gz, set once gz stops growing
	for _, ef := range e.fams {
		id := ef.f.id
		for i, lo := 0, 0; lo < len(ef.rows); i, lo = i+1, lo+gzChunkRows {
			rs := ef.rows[lo:min(lo+gzChunkRows, len(ef.rows))]
			from := gz.Len()
			if old, ok := prev.chunk(id, i); ok && slices.Equal(old.rows, rs) {
				gz.Write(old.gz)
			} else {
				// Writes to a bytes.Buffer through gzip cannot fail.
				zw.Reset(&gz)
				if i == 0 {
					_, _ = zw.Write(ef.f.textHeader)
				}
				for _, r := range rs {
					_, _ = zw.Write(r.text)
				}
				_ = zw.Close()
				e.compressed++
			}
			if i == 0 {
				e.textSize += len(ef.f.textHeader)
			}
			for _, r := range rs {
				e.textSize += len(r.text)
			}
			e.chunks[id] = append(e.chunks[id], gzChunk{rows: rs})
			spans = append(spans, span{id, i, from, gz.Len()})
		}
	}
	e.gz = gz.Bytes()
	for _, s := range spans {
		e.chunks[s.id][s.i].gz = e.gz[s.from:s.to:s.to]
	}
	if len(e.gz) == 0 {
		// No family at all: one empty member, so that a gzipped scrape still starts with one.
		zw.Reset(&gz)
		_ = zw.Close()
		e.gz = gz.Bytes()
	}
}

// chunk is e's i-th member of family id, if e has it.
func (e *exposition) chunk(id, i int) (gzChunk, bool) {
	if e == nil || id >= len(e.chunks) || i >= len(e.chunks[id]) {
		return gzChunk{}, false
	}
	return e.chunks[id][i], true
}

func (e *exposition) writeText(w io.Writer) error {
	for _, ef := range e.fams {
		if _, err := w.Write(ef.f.textHeader); err != nil {
			return err
		}
		for _, r := range ef.rows {
			if _, err := w.Write(r.text); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeProto writes each family as one length-delimited MetricFamily: header fields, then every
// object's Metric fields, derived from the rows' text here (protoRows). Rows that do not convert
// are left out and told to bad: they are this package's own text, so that is a bug, and the
// scrape still gets everything else.
func (e *exposition) writeProto(w io.Writer, bad func(error)) error {
	var body []byte
	for _, ef := range e.fams {
		body = body[:0]
		for _, r := range ef.rows {
			body = r.protoRowsOrTell(body, bad)
		}
		if err := writeProtoFamily(w, ef.f, body); err != nil {
			return err
		}
	}
	return nil
}

// protoRowsOrTell is protoRows that keeps what it converted and tells bad of the rest.
func (r *rows) protoRowsOrTell(dst []byte, bad func(error)) []byte {
	dst, err := r.protoRows(dst)
	if err != nil && bad != nil {
		bad(err)
	}
	return dst
}

// writeProtoFamily writes one length-delimited MetricFamily: f's header fields, then body.
func writeProtoFamily(w io.Writer, f *metricFamily, body []byte) error {
	var lenBuf [binaryMaxVarint]byte
	if _, err := w.Write(protowire.AppendVarint(lenBuf[:0], uint64(len(f.protoHeader)+len(body)))); err != nil {
		return err
	}
	if _, err := w.Write(f.protoHeader); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

const binaryMaxVarint = 10

// writeText writes a row set (the live part) family by family.
func (s *rowSet) writeText(w io.Writer) error {
	for _, r := range s.rows {
		if _, err := w.Write(r.f.textHeader); err != nil {
			return err
		}
		if _, err := w.Write(r.text); err != nil {
			return err
		}
	}
	return nil
}

func (s *rowSet) writeProto(w io.Writer, bad func(error)) error {
	var body []byte
	for i := range s.rows {
		body = s.rows[i].protoRowsOrTell(body[:0], bad)
		if err := writeProtoFamily(w, s.rows[i].f, body); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) current() *exposition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exp
}

// HandlerOpts configure Handler.
type HandlerOpts struct {
	// Log receives errors gathering or encoding Extra (the store's own part cannot fail).
	Log *slog.Logger
	// Extra are gathered per scrape and appended, in the negotiated format (go_* and process_*
	// from their own registry, the repair metrics). Their names must not be the store's.
	Extra []prometheus.Gatherer
	// Registry, when set, is given promhttp_metric_handler_errors_total{cause} (gathering,
	// encoding), the counter client_golang's handler keeps, so that the error count stays where
	// dashboards know it.
	Registry prometheus.Registerer
}

// Handler serves /metrics in the text format, or the delimited protobuf format when the scrape
// prefers it (Prometheus does with native histograms enabled), gzipped when accepted. Both come
// from the same pre-rendered rows (the protobuf derived from their text): the current
// exposition's (a gzipped scrape sends its cached gzip members), then the live part, then Extra. As promhttp with ContinueOnError, an Extra
// gatherer that fails is logged and counted, and what could be gathered is served.
func (s *Store) Handler(opts HandlerOpts) (http.Handler, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promhttp_metric_handler_errors_total",
		Help: "Total number of internal errors encountered by the promhttp metric handler.",
	}, []string{"cause"})
	errs.WithLabelValues("gathering")
	errs.WithLabelValues("encoding")
	if opts.Registry != nil {
		if err := opts.Registry.Register(errs); err != nil {
			return nil, fmt.Errorf("register promhttp_metric_handler_errors_total: %w", err)
		}
	}
	extra := prometheus.Gatherers(opts.Extra)
	protoFormat, textFormat := expfmt.NewFormat(expfmt.TypeProtoDelim), expfmt.NewFormat(expfmt.TypeTextPlain)
	// A row whose protobuf form cannot be derived is left out of a protobuf scrape and counted
	// as promhttp counts a family it cannot encode.
	badRow := func(err error) {
		errs.WithLabelValues("encoding").Inc()
		log.Warn("encode metric rows as protobuf", "err", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		format := expfmt.NegotiateAccept(r.Header, protoFormat, textFormat)
		exp, live := s.current(), s.live()
		mfs, err := extra.Gather()
		if err != nil {
			errs.WithLabelValues("gathering").Inc()
			log.Warn("gather metrics", "err", err)
		}
		h := w.Header()
		h.Add("Vary", "Accept-Encoding")
		gz := acceptsGzip(r)
		if gz {
			h.Set("Content-Encoding", "gzip")
		}
		proto := format.FormatType() == expfmt.TypeProtoDelim
		if proto {
			h.Set("Content-Type", string(format))
		} else {
			format = textFormat
			h.Set("Content-Type", string(textFormat))
		}
		var out io.Writer = w
		var zw *gzip.Writer
		switch {
		case gz && !proto:
			// The cached member, then one for the rest (the same for protobuf below).
			if _, err := w.Write(exp.gz); err != nil {
				return // the client went away
			}
			zw = gzip.NewWriter(w)
			out = zw
		case gz:
			if _, err := w.Write(exp.protoGzip(badRow)); err != nil {
				return
			}
			zw = gzip.NewWriter(w)
			out = zw
		}
		bw := bufio.NewWriterSize(out, 32<<10)
		switch {
		case proto && gz:
			err = live.writeProto(bw, badRow)
		case proto:
			err = exp.writeProto(bw, badRow)
			if err == nil {
				err = live.writeProto(bw, badRow)
			}
		case !gz:
			err = exp.writeText(bw)
			if err == nil {
				err = live.writeText(bw)
			}
		default:
			err = live.writeText(bw)
		}
		if err != nil {
			return // the client went away
		}
		enc := expfmt.NewEncoder(bw, format)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				errs.WithLabelValues("encoding").Inc()
				log.Warn("encode metric family", "family", mf.GetName(), "err", err)
			}
		}
		_ = bw.Flush()
		if zw != nil {
			_ = zw.Close()
		}
	}), nil
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(params, " ", "") != "q=0" {
			return true
		}
	}
	return false
}
