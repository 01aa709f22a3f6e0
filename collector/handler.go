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
	// gz is the whole text of fams as one gzip member: gzip members concatenate (RFC 1952,
	// section 2.2), so a scrape sends it followed by a fresh member for the live part. Prometheus
	// always asks for gzip, and compressing 4 MB per scrape would be most of its cost.
	gz []byte
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

// assemble builds the exposition of objs, in family name order and, within a family, object
// order. The rows are shared with the objects, not copied.
func assemble(objs objects) *exposition {
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
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	cw := &countingWriter{w: zw}
	// Writes to a bytes.Buffer through gzip cannot fail.
	_ = exp.writeText(cw)
	_ = zw.Close()
	exp.gz, exp.textSize = gz.Bytes(), cw.n
	return exp
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

type countingWriter struct {
	w io.Writer
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
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
// exposition's (a gzipped scrape sends its cached gzip member), then the live part, then Extra. As promhttp with ContinueOnError, an Extra
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
