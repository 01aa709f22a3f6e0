package hostile

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/probe/envoyadmin"
)

// TestCardinalityPerEnvoy: an admin listing 50,000 TLS contexts yields at most
// envoyadmin.DefaultMaxEntries of them in /metrics, a finding that says the rest were dropped,
// and a scrape that stays small; a 500-certificate chain is a few lines of the table, not 500.
func TestCardinalityPerEnvoy(t *testing.T) {
	dir, _ := desired(t)
	es := []envoy{
		{name: "many", admin: Contexts(t, 50000).URL},
		{name: "long", admin: Quiet(t).URL, endpoints: []string{LongChainTLS(t, 500)}, sni: "long.example.com", source: "web"},
	}
	cfg := writeConfig(t, dir, es, 10*time.Second)

	u := runAudit(t, "--config", cfg)
	lines := strings.Count(u.stdout, "\n")
	t.Logf("audit table: %d lines, %d bytes", lines, len(u.stdout))
	// The table wraps a finding's message under its head line: match across the wrapping.
	flat := strings.Join(strings.Fields(u.stdout), " ")
	if !regexp.MustCompile(`PARSE_ERROR .{0,200}50000 /certs contexts, only the first 2000 kept`).MatchString(flat) {
		t.Errorf("no PARSE_ERROR saying the contexts were cut to %d", envoyadmin.DefaultMaxEntries)
	}
	longLines := 0
	for _, l := range strings.Split(u.stdout, "\n") {
		if strings.Contains(l, "chain-") {
			longLines++
		}
	}
	if longLines == 0 || longLines > 20 {
		t.Errorf("the table names certificates of the 500-certificate chain on %d lines, want a few (the chain is expired: each certificate is a finding)", longLines)
	}
	if !strings.Contains(u.stdout, "more like these") {
		t.Errorf("no collapsed line in the table")
	}

	x := startServe(t, "--config", cfg, "--interval", "5s")
	waitFor(t, "a round", time.Minute, func() bool { return x.rounds() >= 1 })
	body := x.scrape(t)
	series := 0
	for _, l := range strings.Split(body, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			series++
		}
	}
	many := strings.Count(body, `envoy="many"`)
	t.Logf("scrape with a 50,000-context admin: %d series (%d of them envoy=\"many\"), %d bytes", series, many, len(body))
	if max := 3*envoyadmin.DefaultMaxEntries + 100; many > max {
		t.Errorf("%d series for one Envoy, want at most %d", many, max)
	}
	if len(body) > 4<<20 {
		t.Errorf("scrape is %d bytes, want under 4 MiB", len(body))
	}
}
