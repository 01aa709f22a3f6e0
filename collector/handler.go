package collector

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// textCache is the certificate families of one snapshot in the text format, plain and as one
// gzip member: gzip members concatenate (RFC 1952, section 2.2), so a scrape can send the
// cached member followed by a fresh member for the live part.
type textCache struct {
	snap      *snapshot
	plain, gz []byte
}

// renderCerts renders the certificate families of snap and their text. It runs before snap is
// swapped in (Record, UpdateDesired), so the text is always there when its snapshot is: before,
// a scrape arriving between the swap and the render went through promhttp over every const
// metric — about a second at 10,000 Secrets, the whole p99. A family that fails to encode (which
// const metrics from a snapshot cannot, short of a programming error) leaves the text nil and
// scrapes take the slow path.
func renderCerts(snap *snapshot) ([]*dto.MetricFamily, *textCache) {
	mfs := gatherCerts(snap)
	plain, err := encodeText(mfs)
	if err != nil {
		return mfs, nil
	}
	gz, err := gzipBytes(plain)
	if err != nil {
		return mfs, nil
	}
	return mfs, &textCache{snap: snap, plain: plain, gz: gz}
}

// encodeText writes families in the text format, without empty label pairs.
func encodeText(mfs []*dto.MetricFamily) ([]byte, error) {
	var plain bytes.Buffer
	enc := expfmt.NewEncoder(&plain, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, fmt.Errorf("encode %s: %w", mf.GetName(), err)
		}
	}
	return dropEmptyLabels(plain.Bytes()), nil
}

func gzipBytes(b []byte) ([]byte, error) {
	var gz bytes.Buffer
	gz.Grow(len(b) / 6)
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}

func (s *Store) cachedText() *textCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.text != nil && s.text.snap == s.snap {
		return s.text
	}
	return nil
}

// Handler serves /metrics the way kube-state-metrics does: the per-round certificate text is
// written from a cache and only the small live part (findings, ages, self-health, extra) is
// encoded per request. Requests for another format than plain text, and scrapes before the first
// round, go to fallback (promhttp over Gatherer).
func (s *Store) Handler(fallback http.Handler, log *slog.Logger, extra ...prometheus.Gatherer) (http.Handler, error) {
	live := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{findingCollector{s}, healthCollector{s}} {
		if err := live.Register(c); err != nil {
			return nil, err
		}
	}
	gs := append(prometheus.Gatherers{live}, extra...)
	textFormat := expfmt.NewFormat(expfmt.TypeTextPlain)
	accepted := expfmt.DefaultAcceptedFormats()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc := s.cachedText()
		if tc == nil || expfmt.NegotiateAccept(r.Header, accepted...).FormatType() != expfmt.TypeTextPlain {
			fallback.ServeHTTP(w, r)
			return
		}
		mfs, err := gs.Gather()
		if err != nil {
			// As promhttp.ContinueOnError: serve what could be gathered, and say so in the log.
			log.Warn("gather live metrics", "err", err)
		}
		var liveText bytes.Buffer
		enc := expfmt.NewEncoder(&liveText, textFormat)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				log.Warn("encode metric family", "family", mf.GetName(), "err", err)
			}
		}
		liveBytes := dropEmptyLabels(liveText.Bytes())
		h := w.Header()
		h.Set("Content-Type", string(textFormat))
		h.Add("Vary", "Accept-Encoding")
		if acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
			_, _ = w.Write(tc.gz)
			zw := gzip.NewWriter(w)
			_, _ = zw.Write(liveBytes)
			_ = zw.Close()
			return
		}
		_, _ = w.Write(tc.plain)
		_, _ = w.Write(liveBytes)
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

// dropEmptyLabels removes label pairs with an empty value from the sample lines of a text
// exposition. Prometheus treats `envoy=""` and no envoy label as the same series, and the
// certificate families carry one fixed label set for every view: the desired view's empty envoy
// and sni (and location in Kubernetes mode) were ~0.6 MB of a 10,000-Secret scrape. A line whose
// labels do not scan (which the encoder never writes) is kept as it is.
func dropEmptyLabels(text []byte) []byte {
	out := make([]byte, 0, len(text))
	for len(text) > 0 {
		var line []byte
		line, text = cutLine(text)
		out = appendWithoutEmptyLabels(out, line)
	}
	return out
}

func appendWithoutEmptyLabels(out, line []byte) []byte {
	open := bytes.IndexByte(line, '{')
	if len(line) == 0 || line[0] == '#' || open < 0 || !bytes.Contains(line, []byte(`=""`)) {
		return append(out, line...)
	}
	start := len(out)
	out = append(out, line[:open+1]...)
	rest := line[open+1:]
	first := true
	for {
		if len(rest) > 0 && rest[0] == '}' {
			break
		}
		eq := bytes.IndexByte(rest, '=')
		if eq < 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
			return append(out[:start], line...)
		}
		// The value ends at the first unescaped quote.
		end := -1
		for i := eq + 2; i < len(rest); i++ {
			if rest[i] == '\\' {
				i++
				continue
			}
			if rest[i] == '"' {
				end = i
				break
			}
		}
		if end < 0 {
			return append(out[:start], line...)
		}
		if end > eq+2 {
			if !first {
				out = append(out, ',')
			}
			out = append(out, rest[:end+1]...)
			first = false
		}
		rest = rest[end+1:]
		if len(rest) > 0 && rest[0] == ',' {
			rest = rest[1:]
		}
	}
	if first {
		out = out[:len(out)-1] // no label left: drop the "{"
		return append(out, rest[1:]...)
	}
	return append(out, rest...)
}
