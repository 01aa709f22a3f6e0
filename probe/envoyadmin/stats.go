package envoyadmin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/certdrift/certdrift/probe/envoystate"
)

// statsFilter is the regular expression sent as /stats?filter= (RE2, partial match, supported by
// Envoy since 1.12 and by every version certdrift targets; the recording script in
// testdata/record uses the same text, which a test checks). It keeps the few counters and gauges
// certdrift reads; a large Envoy has hundreds of thousands of stats. control_plane.connected_state
// and the clusters' upstream_cx_connect_fail are the evidence of a failing xDS connection
// (audit's checkUpstreamVerify).
const statsFilter = `^(server\.(uptime|days_until_first_cert_expiring|seconds_until_first_ocsp_response_expiring)` +
	`|control_plane\.connected_state` +
	`|cluster\..+\.upstream_cx_connect_fail` +
	`|sds\..+\.(key_rotation_failed|update_success|update_rejected|update_failure|update_time)` +
	`|.+\.ssl_context_update_by_sds` +
	`|.+\.ssl\.(handshake|connection_error|no_certificate|fail_verify_[a-z_]+)` +
	`|.+\.ssl\.certificate\..+\.expiration_unix_time_seconds)$`

// maxStatLines bounds the work on one /stats body (Istio sidecars have ~5k stats, large gateways
// a few hundred thousand; the filter keeps certdrift's share to a few per secret and listener).
const maxStatLines = 2_000_000

// ErrPrometheusFormat is returned for /stats/prometheus output, whose names are rewritten (secret
// names sanitised into metric names, tags moved to labels) so that they cannot be mapped back.
var ErrPrometheusFormat = errors.New("this is Prometheus exposition (/stats/prometheus), not the /stats text format")

// ParseStats reads the /stats text format: one "name: value" per line. Histograms ("name:
// P0(...) ...", "No recorded values") and text readouts ("name: \"...\"") are skipped. Lines that
// are neither are an error only when nothing at all could be read, so one odd line in a long
// body costs that line.
func ParseStats(data []byte) (envoystate.Stats, error) {
	st := envoystate.Stats{Counters: map[string]uint64{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var (
		bad      int
		firstBad string
		lines    int
	)
	for sc.Scan() {
		lines++
		if lines > maxStatLines {
			return st, fmt.Errorf("parse /stats: more than %d lines", maxStatLines)
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			if strings.HasPrefix(line, "# TYPE ") || strings.HasPrefix(line, "# HELP ") {
				return st, fmt.Errorf("parse /stats: %w", ErrPrometheusFormat)
			}
			continue
		}
		i := strings.LastIndex(line, ": ")
		if i <= 0 {
			if isPromLine(line) {
				return st, fmt.Errorf("parse /stats: %w", ErrPrometheusFormat)
			}
			bad++
			if firstBad == "" {
				firstBad = line
			}
			continue
		}
		name, value := line[:i], line[i+2:]
		if v, err := strconv.ParseUint(value, 10, 64); err == nil {
			st.Counters[name] = v
			continue
		}
		if isHistogramOrText(line) {
			continue
		}
		bad++
		if firstBad == "" {
			firstBad = line
		}
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("parse /stats: %w", err)
	}
	if len(st.Counters) == 0 && bad > 0 {
		return st, fmt.Errorf("parse /stats: no \"name: value\" line among %d lines (first: %q)", lines, preview([]byte(firstBad)))
	}
	return st, nil
}

// isPromLine recognises "metric_name{labels} 123" as Prometheus exposition prints it.
func isPromLine(line string) bool {
	sp := strings.LastIndexByte(line, ' ')
	if sp <= 0 {
		return false
	}
	if _, err := strconv.ParseFloat(line[sp+1:], 64); err != nil {
		return false
	}
	name := strings.TrimSpace(line[:sp])
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if !strings.HasSuffix(name, "}") {
			return false
		}
		name = name[:i]
	}
	if name == "" {
		return false
	}
	for i, c := range name {
		ok := c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// isHistogramOrText recognises the non-numeric stat lines Envoy prints. The first ": " is used,
// since a histogram's value never holds one and a stat name never does either.
func isHistogramOrText(line string) bool {
	i := strings.Index(line, ": ")
	if i <= 0 {
		return false
	}
	v := line[i+2:]
	return strings.HasPrefix(v, "P0(") || strings.HasPrefix(v, "\"") || v == "No recorded values"
}
