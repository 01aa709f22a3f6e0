package envoyadmin

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Connection bounds of the transports made here: a Snapshot makes four requests at once (/certs,
// /config_dump, /stats, /server_info), so four connections per admin at most, kept idle between
// rounds to be reused by the next, and dropped after idleConnTimeout when rounds are further apart
// than that.
const (
	maxConnsPerHost = 4
	idleConnTimeout = 90 * time.Second
)

func newTransport() *http.Transport {
	return &http.Transport{
		// Admin endpoints are pod IPs and loopback addresses, never reached through an HTTP proxy
		// from the environment.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: DefaultTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: maxConnsPerHost,
		MaxConnsPerHost:     maxConnsPerHost,
		IdleConnTimeout:     idleConnTimeout,
	}
}

// Transports keeps one HTTP client per admin URL across rounds, so that a process polling Envoys
// every few seconds reuses its connections instead of leaving each round's behind (issue 15: a
// transport per Envoy per round left ~420 idle connections per admin at a 100 ms interval).
// Retain drops the clients of Envoys that are gone. It also holds the Memo of the Clients it makes,
// so a process polling the same Envoys parses only the answers that changed. Safe for concurrent
// use; the zero value is ready.
type Transports struct {
	mu      sync.Mutex
	clients map[string]*http.Client
	memo    Memo
}

// Client returns the client for baseURL, making it on first use.
func (t *Transports) Client(baseURL string) *http.Client {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.clients == nil {
		t.clients = map[string]*http.Client{}
	}
	c := t.clients[baseURL]
	if c == nil {
		c = &http.Client{Transport: newTransport()}
		t.clients[baseURL] = c
	}
	return c
}

// New is envoyadmin.New with opts.HTTPClient taken from the pool (when opts has none), and the
// pool's Memo (when opts has none).
func (t *Transports) New(baseURL string, opts Options) (*Client, error) {
	if opts.HTTPClient == nil {
		opts.HTTPClient = t.Client(baseURL)
	}
	if opts.Memo == nil {
		opts.Memo = &t.memo
	}
	return New(baseURL, opts)
}

// Retain keeps the clients of the admin URLs in keep and closes the idle connections of the rest.
func (t *Transports) Retain(keep []string) {
	want := make(map[string]bool, len(keep))
	for _, k := range keep {
		want[k] = true
	}
	// The Memo is keyed by the admin URL here too (Options.MemoKey's default), with trailing
	// slashes dropped as New does.
	trimmed := make([]string, 0, len(keep))
	for _, k := range keep {
		trimmed = append(trimmed, strings.TrimRight(k, "/"))
	}
	t.memo.Retain(trimmed)
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, c := range t.clients {
		if !want[k] {
			c.CloseIdleConnections()
			delete(t.clients, k)
		}
	}
}

// Len is how many admin URLs have a client.
func (t *Transports) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.clients)
}

// truncate keeps the first max of xs and says what it dropped.
func truncate[T any](xs []T, max int, what string) ([]T, string) {
	if len(xs) <= max {
		return xs, ""
	}
	return xs[:max], fmt.Sprintf("%d %s, only the first %d kept", len(xs), what, max)
}
