package envoyadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/netbudget"
)

// Options tune a Client. The zero value is usable.
type Options struct {
	// HTTPClient is used for every request (through a copy that follows no redirects); nil means a
	// client of its own with no global state.
	HTTPClient *http.Client
	// Timeout bounds one Envoy's whole admin read: all the requests of a Snapshot together (or of
	// one Certs or Stats call), bodies included (default 5s). A hung admin costs one Timeout.
	Timeout time.Duration
	// MaxBodyBytes bounds each response body (default 16 MiB: /config_dump of a large Envoy runs
	// to several MB even with the secret and listener masks).
	MaxBodyBytes int64
	// Now is the clock for Snapshot.CollectedAt and ServerStart (default time.Now).
	Now func() time.Time
	// Budget pays for every body read (nil: netbudget.Process(), shared by the whole process), so
	// that concurrent reads of many Envoys hold at most its limit between them.
	Budget *netbudget.Budget
	// MaxEntries bounds the /certs contexts and the config_dump secrets kept from one Envoy
	// (default DefaultMaxEntries); the rest are dropped and Snapshot.Truncated says so.
	MaxEntries int
	// Memo, when set, keeps what Snapshot parsed from this Envoy's answers for the next round
	// (see Memo); MemoKey names the Envoy in it (default: the admin URL, which is not stable
	// through a port-forward: pass the pod's identity there).
	Memo    *Memo
	MemoKey string
}

// Defaults for Options.
const (
	DefaultTimeout      = 5 * time.Second
	DefaultMaxBodyBytes = 16 << 20
	// DefaultMaxEntries is the most /certs contexts, and separately the most secrets, kept from
	// one Envoy. A real Envoy has one context per TLS filter chain and cluster: thousands are
	// rare, 50,000 is an admin making series up (issue 15: 150,057 series, a 17 MB scrape).
	DefaultMaxEntries = 2000
)

// Client reads one Envoy admin endpoint.
type Client struct {
	base    string
	hc      *http.Client
	timeout time.Duration
	maxBody int64
	now     func() time.Time
	budget  *netbudget.Budget
	maxEnt  int
	memo    *Memo
	memoKey string
}

// New returns a Client for the admin endpoint at baseURL ("http://127.0.0.1:15000").
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("envoy admin URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("envoy admin URL %q: scheme must be http or https", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("envoy admin URL %q: no host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("envoy admin URL %q: must not have a query or fragment", baseURL)
	}
	c := &Client{
		base:    strings.TrimRight(u.String(), "/"),
		hc:      opts.HTTPClient,
		timeout: opts.Timeout,
		maxBody: opts.MaxBodyBytes,
		now:     opts.Now,
		budget:  netbudget.Or(opts.Budget),
		maxEnt:  opts.MaxEntries,
		memo:    opts.Memo,
		memoKey: opts.MemoKey,
	}
	if c.memoKey == "" {
		c.memoKey = strings.TrimRight(u.String(), "/")
	}
	if c.maxEnt <= 0 {
		c.maxEnt = DefaultMaxEntries
	}
	if c.hc == nil {
		// A caller polling the same Envoy every round should pass a client from a Transports
		// pool: a transport per Client leaves its idle connections behind each round.
		c.hc = &http.Client{Transport: newTransport()}
	}
	// Envoy's admin never redirects: a 3xx comes from something else, and following it could take
	// the read (and the port-forward's credentials) to another host. A copy, so that the caller's
	// client keeps its own policy.
	hc := *c.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.hc = &hc
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.maxBody <= 0 {
		c.maxBody = DefaultMaxBodyBytes
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Query strings certdrift sends. The masks keep only secrets or listeners in a plain-dump-shaped
// response (Envoy 1.36 and 1.40 both honour them; an Envoy without ?mask= ignores it and sends the
// whole dump, which parses the same way). Commas are left unescaped on purpose.
const (
	secretsQuery   = "/config_dump?mask=static_secrets,dynamic_active_secrets,dynamic_warming_secrets"
	listenersQuery = "/config_dump?mask=static_listeners,dynamic_listeners"
)

// Snapshot reads /certs, /config_dump, /stats and /server_info concurrently, all within one
// Options.Timeout. It always returns a Snapshot; each part carries its own error. Errors name the
// request ("GET /certs: HTTP 503 ..."), not the admin URL, which is Snapshot.AdminURL.
func (c *Client) Snapshot(ctx context.Context) *envoystate.Snapshot {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	s := &envoystate.Snapshot{AdminURL: c.base}
	var (
		wg     sync.WaitGroup
		uptime time.Duration
		truncs [2]string
	)
	// /server_info is ~100 KB (the extension list) for two fields; with a Memo it is read once
	// per Envoy process, and again only when server.uptime in /stats says the process restarted.
	known, haveKnown := c.memo.server(c.memoKey)
	wg.Add(2) // /certs and /config_dump; /stats is read below, on this goroutine
	go func() {
		defer wg.Done()
		s.Contexts, s.CertsErr = c.certs(ctx)
		var note string
		if s.Contexts, note = truncate(s.Contexts, c.maxEnt, "/certs contexts"); note != "" {
			truncs[0] = note
		}
	}()
	go func() {
		defer wg.Done()
		d, err := c.config(ctx)
		s.Secrets, s.Listeners, s.ConfigSkipped, s.ConfigErr = d.Secrets, d.Listeners, d.Skipped, err
		var n1, n2, n3 string
		s.Secrets, n1 = truncate(s.Secrets, c.maxEnt, "config_dump secrets")
		s.Listeners, n2 = truncate(s.Listeners, c.maxEnt, "config_dump TLS filter chains")
		s.ConfigSkipped, n3 = truncate(s.ConfigSkipped, c.maxEnt, "unreadable config_dump parts")
		truncs[1] = joinNonEmpty(n1, n2, n3)
	}()
	readInfo := !haveKnown // whether /server_info was read in this snapshot
	if !haveKnown {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.ServerVersion, uptime, s.ServerInfoErr = c.serverInfo(ctx)
		}()
	}
	s.Stats, s.StatsErr = c.Stats(ctx)
	if haveKnown {
		up, ok := s.Stats.Counters["server.uptime"]
		now := c.now()
		if ok && s.StatsErr == nil && now.Sub(known.read) < serverInfoMaxAge &&
			sameProcess(known.start, now.Add(-time.Duration(up)*time.Second).Truncate(time.Second)) {
			s.ServerVersion, s.ServerStart = known.version, known.start
		} else {
			readInfo = true
			s.ServerVersion, uptime, s.ServerInfoErr = c.serverInfo(ctx)
		}
	}
	wg.Wait()
	s.Truncated = joinNonEmpty(truncs[:]...)
	// Contexts, secrets and listeners were cleaned as they were parsed (before the Memo kept
	// them); the version is cleaned here.
	s.ServerVersion = cleanText(s.ServerVersion)
	s.CollectedAt = c.now()
	if readInfo && s.ServerInfoErr == nil {
		// An Envoy in its first second says "0s": its start is now, not unknown.
		s.ServerStart = s.CollectedAt.Add(-uptime).Truncate(time.Second)
		c.memo.setServer(c.memoKey, serverEntry{version: s.ServerVersion, start: s.ServerStart, read: s.CollectedAt})
	}
	return s
}

// certs is Certs for Snapshot: cleaned, and through the Memo.
func (c *Client) certs(ctx context.Context) ([]envoystate.TLSContext, error) {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	body, release, err := c.fetch(ctx, "/certs", true)
	defer release()
	if err != nil {
		return nil, err
	}
	v, err := c.memo.parse(c.memoKey, "/certs", body, func(b []byte) (any, error) {
		cs, err := ParseCerts(b)
		sanitizeContexts(cs)
		return cs, err
	})
	return cloneContexts(v), err
}

// parseDump parses one config_dump answer, cleaned, through the Memo.
func (c *Client) parseDump(query string, body []byte) (configDump, error) {
	v, err := c.memo.parse(c.memoKey, query, body, func(b []byte) (any, error) {
		d, err := parseConfigDump(b, envoystate.SecretActive)
		sanitizeConfig(d.Secrets, d.Listeners)
		return d, err
	})
	return cloneDump(v), err
}

// deadline bounds one admin read by Options.Timeout; a deadline the caller set earlier stays.
func (c *Client) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// Certs reads /certs within one Options.Timeout.
func (c *Client) Certs(ctx context.Context) ([]envoystate.TLSContext, error) {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	body, release, err := c.fetch(ctx, "/certs", true)
	defer release()
	if err != nil {
		return nil, err
	}
	return ParseCerts(body) // its errors say "parse /certs: ..."
}

// config reads secrets and listeners through the masks, falling back to one plain /config_dump
// when Envoy rejects a mask (HTTP 400: it does so when no config of that kind exists at all, and
// an Envoy could reject the parameter). The plain dump holds both parts, so it is fetched at most
// once and, once fetched, no further masked request is made.
func (c *Client) config(ctx context.Context) (configDump, error) {
	var (
		out       configDump
		plain     *configDump
		plainErr  error
		plainDone bool
		errs      []error
		// plainReported: the plain fetch's error is in errs already.
		plainReported bool
	)
	getPlain := func() (*configDump, error) {
		if plainDone {
			return plain, plainErr
		}
		plainDone = true
		body, release, err := c.fetch(ctx, "/config_dump", true)
		defer release()
		if err != nil {
			plainErr = err
			return nil, err
		}
		d, err := c.parseDump("/config_dump", body)
		if err != nil {
			plainErr = fmt.Errorf("GET /config_dump: %w", err)
			return nil, plainErr
		}
		plain = &d
		return plain, nil
	}
	for _, part := range []struct {
		query string
		take  func(from configDump)
	}{
		{secretsQuery, func(d configDump) { out.Secrets = d.Secrets; out.Skipped = append(out.Skipped, d.Skipped...) }},
		{listenersQuery, func(d configDump) { out.Listeners = d.Listeners; out.Skipped = append(out.Skipped, d.Skipped...) }},
	} {
		if plain != nil {
			part.take(*plain)
			continue
		}
		body, release, err := c.fetch(ctx, part.query, true)
		if isStatus(err, http.StatusBadRequest) {
			d, err := getPlain()
			if err != nil {
				if !plainReported { // both parts share it: report it once
					plainReported = true
					errs = append(errs, err)
				}
				continue
			}
			part.take(*d)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d, err := c.parseDump(part.query, body)
		release()
		if err != nil {
			errs = append(errs, fmt.Errorf("GET %s: %w", shortURL(part.query), err))
			continue
		}
		// An Envoy that ignores ?mask= sends everything; take only this part so the other
		// request does not add duplicates.
		part.take(d)
	}
	out.Skipped = dedupe(out.Skipped)
	return out, errors.Join(errs...)
}

func joinNonEmpty(xs ...string) string {
	var out []string
	for _, x := range xs {
		if x != "" {
			out = append(out, x)
		}
	}
	return strings.Join(out, "; ")
}

func dedupe[T comparable](xs []T) []T {
	seen := map[T]bool{}
	var out []T
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// Stats reads /stats?filter=, falling back to the whole /stats when Envoy rejects the filter, all
// within one Options.Timeout.
func (c *Client) Stats(ctx context.Context) (envoystate.Stats, error) {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	q := "/stats?filter=" + url.QueryEscape(statsFilter)
	body, release, err := c.fetch(ctx, q, false)
	if isStatus(err, http.StatusBadRequest) {
		release()
		q = "/stats"
		body, release, err = c.fetch(ctx, q, false)
	}
	defer release()
	if err != nil {
		return envoystate.Stats{}, err
	}
	st, err := ParseStats(body)
	if err != nil {
		return st, fmt.Errorf("GET %s: %w", shortURL(q), err)
	}
	return st, nil
}

// serverInfo reads the version and uptime from /server_info. It is decoded with encoding/json into
// the two fields wanted: the rest (command line, node, extension list) is ~100 KB of no interest.
func (c *Client) serverInfo(ctx context.Context) (version string, uptime time.Duration, err error) {
	body, release, err := c.fetch(ctx, "/server_info", true)
	defer release()
	if err != nil {
		return "", 0, err
	}
	return parseServerInfo(body)
}

func parseServerInfo(body []byte) (string, time.Duration, error) {
	var si struct {
		Version string `json:"version"`
		Uptime  string `json:"uptime_current_epoch"`
	}
	if err := json.Unmarshal(body, &si); err != nil {
		return "", 0, jsonErr("parse /server_info", err)
	}
	// "<sha>/1.40.0/Clean/RELEASE/BoringSSL"
	version := si.Version
	if parts := strings.Split(si.Version, "/"); len(parts) >= 2 {
		version = parts[1]
	}
	var up time.Duration
	if si.Uptime != "" {
		d, err := time.ParseDuration(si.Uptime)
		if err != nil || d < 0 {
			return version, 0, fmt.Errorf("parse /server_info: uptime_current_epoch %q is not a duration", preview([]byte(si.Uptime)))
		}
		up = d
	}
	return version, up, nil
}
