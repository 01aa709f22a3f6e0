package hostile

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/cdbin"
)

// TestNoForeignKeyBytes: admins that echo their own private key — in error bodies as PEM, bare
// base64, hex and JSON-escaped lines; in /certs serials, paths and SANs; in a secret's name; in
// /server_info; as raw DER — and a TLS endpoint answering with the key's DER: not 12 bytes of the
// key, nor 16 characters of its base64 or hex, appear in the table, the JSON report, the logs at
// debug level, or /metrics. The desired key (certdrift's own input) does not either.
func TestNoForeignKeyBytes(t *testing.T) {
	k := NewForeignKey(t)
	dir, desiredKey := desired(t)
	garbage := GarbageTLS(t, k)
	es := []envoy{
		{name: "key-errors", admin: KeyErrors(t, k).URL, endpoints: []string{garbage}},
		{name: "key-fields", admin: KeyFields(t, k).URL, endpoints: []string{garbage}, sni: "web.example.com"},
		{name: "nested", admin: Nested(t).URL},
		{name: "drip", admin: Drip(t).URL},
		{name: "hang", admin: Hang(t).URL},
	}
	cfg := writeConfig(t, dir, es, 2*time.Second)

	outputs := map[string]string{}
	for _, format := range []string{"table", "json"} {
		u := runAudit(t, "--config", cfg, "-o", format, "--log.level", "debug")
		if u.code != 1 {
			t.Fatalf("audit -o %s: exit %d, want 1 (findings); stderr has %d bytes", format, u.code, len(u.stderr))
		}
		outputs["audit "+format+" report"] = u.stdout
		outputs["audit "+format+" log"] = u.stderr
	}
	x := startServe(t, "--config", cfg, "--interval", "1s", "--log.level", "debug")
	waitFor(t, "two rounds", time.Minute, func() bool { return x.rounds() >= 2 })
	outputs["serve /metrics"] = x.scrape(t)
	outputs["serve log"] = x.Logs.String()

	for name, out := range outputs {
		if leak, where := k.Leaks(out); leak {
			t.Errorf("%s carries the hostile admin's key: %s", name, where)
		}
		if cdbin.LeaksKey(out, [][]byte{desiredKey}) {
			t.Errorf("%s carries the desired private key", name)
		}
	}
	// The redaction must not hide that the admins were judged: each is reported.
	for _, e := range es {
		if !strings.Contains(outputs["audit table report"], e.name) {
			t.Errorf("the table says nothing about %s", e.name)
		}
	}
	if !strings.Contains(outputs["audit table report"], "withheld") {
		t.Errorf("no excerpt says it withheld anything: were the key-bearing bodies quoted at all?")
	}
	// A serial that is not hex never becomes a label value.
	for _, l := range strings.Split(outputs["serve /metrics"], "\n") {
		if strings.HasPrefix(l, "certdrift_certificate_info{") && strings.Contains(l, `envoy="key-fields"`) && strings.Contains(l, `serial="`) {
			if s := between(l, `serial="`, `"`); s != "" && strings.Trim(strings.ToLower(s), "0123456789abcdef") != "" {
				t.Errorf("certificate_info of key-fields has serial %d bytes long that is not hex", len(s))
			}
		}
	}
	fmt.Fprintf(testWriter{t}, "outputs checked: %d (%d bytes)", len(outputs), total(outputs))
}

func between(s, a, b string) string {
	_, after, ok := strings.Cut(s, a)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, b)
	return v
}

func total(m map[string]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
