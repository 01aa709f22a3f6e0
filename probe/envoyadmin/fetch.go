package envoyadmin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/netbudget"
)

// ErrBodyTooLarge is returned when a response exceeds Options.MaxBodyBytes. The body is not read
// past the limit.
var ErrBodyTooLarge = errors.New("response body exceeds the size limit")

// ErrNotJSON is returned when a JSON endpoint answers with something else, typically an HTML page
// from a port that is not Envoy's admin (or a proxy's error page in front of it).
var ErrNotJSON = errors.New("response is not JSON")

// StatusError is a response other than 200 OK. Callers branch on Code: 404 from an Envoy means
// the endpoint does not exist in that version, 400 that a query parameter was rejected.
type StatusError struct {
	// URL is the request's path and query ("/certs"), relative to the admin URL (which the
	// Snapshot carries), shortened when long.
	URL  string
	Code int
	// Body is a short printable excerpt of what the server said (Envoy puts the reason there);
	// empty for a redirect, whose body is never read.
	Body string
	// Location is where a 3xx pointed (escaped, shortened). Redirects are never followed.
	Location string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("GET %s: HTTP %d %s", e.URL, e.Code, http.StatusText(e.Code))
	if e.Code == http.StatusNotFound {
		msg += " (endpoint missing: an Envoy too old for it, or not an Envoy admin port)"
	}
	if e.Code >= 300 && e.Code < 400 {
		msg += fmt.Sprintf(": redirect to %q not followed (Envoy's admin does not redirect: is something else on this port?)", e.Location)
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Unreachable reports whether the status means nothing usable answered (a 5xx from Envoy or a
// proxy in front of it), as opposed to an answer certdrift cannot use (a 404 from something that
// is not an Envoy admin). The audit reports the first as UNREACHABLE, the second as PARSE_ERROR.
func (e *StatusError) Unreachable() bool { return e.Code >= 500 }

func isStatus(err error, code int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == code
}

// fetch GETs c.base+pathQuery within ctx's deadline (the budget of the whole admin read) and
// returns the body, read through the size limit and paid for from the process's network memory
// budget (netbudget): release gives the bytes back once the body is parsed, and is never nil. On
// error nothing is held. wantJSON rejects HTML and other non-JSON answers before anything tries to
// decode them. Errors name the request by its path, not the admin URL: callers print that once.
func (c *Client) fetch(ctx context.Context, pathQuery string, wantJSON bool) (body []byte, release func(), err error) {
	lease := c.budget.Lease()
	release = lease.Release
	defer func() {
		if err != nil {
			lease.Release()
			body, release = nil, func() {}
		}
	}()
	full := c.base + pathQuery
	u := shortURL(pathQuery) // for messages: the stats filter alone is 400 bytes escaped
	if err := ctx.Err(); err != nil {
		// The budget went on earlier requests of this read: say so rather than time a request
		// that never left.
		return nil, nil, fmt.Errorf("GET %s: not sent, the admin read's %s budget is spent: %w", u, c.timeout, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, full, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if wantJSON {
		req.Header.Set("Accept", "application/json")
	}
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, c.timeoutErr(ctx, u, "request", start, 0, err)
	}
	// Closing without draining drops the connection, which is what a hostile or oversized
	// response deserves.
	defer resp.Body.Close()

	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, nil, &StatusError{URL: u, Code: resp.StatusCode, Location: previewN([]byte(resp.Header.Get("Location")), 200)}
	}
	if resp.StatusCode != http.StatusOK {
		// More is read than shown, so that a blob starting in the excerpt is redacted whole.
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, nil, &StatusError{URL: u, Code: resp.StatusCode, Body: strings.TrimSpace(printable(snippet))}
	}
	if resp.ContentLength > c.maxBody {
		return nil, nil, fmt.Errorf("GET %s: %w: Content-Length %d > %d bytes", u, ErrBodyTooLarge, resp.ContentLength, c.maxBody)
	}
	ct := resp.Header.Get("Content-Type")
	if wantJSON && strings.Contains(strings.ToLower(ct), "html") {
		return nil, nil, fmt.Errorf("GET %s: %w: Content-Type %q (is this Envoy's admin port?)", u, ErrNotJSON, previewN([]byte(ct), 80))
	}
	body, err = lease.ReadAll(ctx, resp.Body, c.maxBody, resp.ContentLength)
	if errors.Is(err, netbudget.ErrExhausted) {
		return nil, nil, fmt.Errorf("GET %s: reading body (%d bytes so far): %w", u, len(body), err)
	}
	if err != nil {
		return nil, nil, c.timeoutErr(ctx, u, "reading body", start, len(body), err)
	}
	if int64(len(body)) > c.maxBody {
		return nil, nil, fmt.Errorf("GET %s: %w: more than %d bytes", u, ErrBodyTooLarge, c.maxBody)
	}
	if wantJSON {
		t := bytes.TrimSpace(body)
		if len(t) == 0 || (t[0] != '{' && t[0] != '[') {
			return nil, nil, fmt.Errorf("GET %s: %w: body starts with %q (Content-Type %q)", u, ErrNotJSON, preview(t), previewN([]byte(ct), 80))
		}
	}
	return body, release, nil
}

func shortURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 && len(u)-i > 80 {
		return u[:i+60] + "…"
	}
	return u
}

// timeoutErr says plainly when the deadline was the cause, since "context deadline exceeded"
// alone does not tell which request or how long it ran.
func (c *Client) timeoutErr(ctx context.Context, u, stage string, start time.Time, got int, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("GET %s: %s: no complete answer within the admin read's %s budget (got %d bytes after %s): %w",
			u, stage, c.timeout, got, time.Since(start).Round(time.Millisecond), context.DeadlineExceeded)
	}
	return fmt.Errorf("GET %s: %s: %w", u, stage, err)
}

// printable keeps an error excerpt to one line of at most 200 bytes, with anything that could be
// key material withheld (pki.RedactKeyMaterial: a misbehaving server must not get a key into
// certdrift's logs, findings or metrics). Valid UTF-8 text is kept as is; bytes that are not UTF-8
// and characters that are not printable (controls, bidi overrides) are escaped, \xNN per byte, so
// that a message neither garbles nor rewrites a terminal.
func printable(b []byte) string {
	return escape(pki.RedactKeyMaterial(b), 200)
}

// escape renders at most max bytes of b as printable(b) describes; a character is never cut.
func escape(b []byte, max int) string {
	var sb strings.Builder
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if i+n > max {
			break
		}
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			sb.WriteByte(' ')
		case r == utf8.RuneError && n == 1, !unicode.IsPrint(r):
			for _, c := range b[i : i+n] {
				fmt.Fprintf(&sb, "\\x%02x", c)
			}
		default:
			sb.Write(b[i : i+n])
		}
		i += n
	}
	return sb.String()
}
