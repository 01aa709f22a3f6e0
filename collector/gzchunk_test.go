package collector

import (
	"bytes"
	"compress/gzip"
	"crypto/x509"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/certdrift/certdrift/probe/desired"
)

// gunzip is every member of gz, as Go's reader (and Prometheus's scrape) reads them.
func gunzip(t *testing.T, gz []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkGzip fails unless exp's gzip members hold exactly its text.
func checkGzip(t *testing.T, what string, exp *exposition) {
	t.Helper()
	var text bytes.Buffer
	if err := exp.writeText(&text); err != nil {
		t.Fatal(err)
	}
	if got := gunzip(t, exp.gz); !bytes.Equal(got, text.Bytes()) || exp.textSize != text.Len() {
		t.Errorf("%s: the gzip members hold %d bytes (text size %d), the text is %d: they differ", what, len(got), exp.textSize, text.Len())
	}
}

// TestGzipChunksReused: one Secret's change between rounds compresses only the chunks holding its
// rows again, and copies the others; a Secret added or removed shifts the chunks after it, which
// are then compressed again. After each, the members hold exactly the text.
func TestGzipChunksReused(t *testing.T) {
	r := fleet(3000, 100)
	s := NewStore(Options{Now: clock(t0)})
	s.Record(r)
	first := s.current()
	checkGzip(t, "first round", first)
	total := 0
	for _, cs := range first.chunks {
		total += len(cs)
	}
	if first.compressed != total || total < 20 {
		t.Fatalf("first round: %d of %d chunks compressed, want all and at least 20", first.compressed, total)
	}

	o := r.Inputs.Desired[1500]
	o.Items = []desired.Item{{Chain: []*x509.Certificate{cert("rotated.example.com", 99999)}}}
	s.UpdateDesired([]DesiredUpdate{{Observation: o}}, t0.Add(time.Second))
	upd := s.current()
	checkGzip(t, "one Secret updated", upd)
	t.Logf("one Secret updated: %d of %d chunks compressed", upd.compressed, total)
	// Its object has rows in a few families (certificate info, validity): one chunk each.
	if upd.compressed == 0 || upd.compressed > 6 {
		t.Errorf("one Secret updated: %d chunks compressed, want its few families' (1–6) of %d", upd.compressed, total)
	}

	removed := fleet(3000, 100)
	removed.Inputs.Desired = append(removed.Inputs.Desired[:10:10], removed.Inputs.Desired[11:]...)
	removed.Finished = t0.Add(2 * time.Second)
	s.Record(removed)
	checkGzip(t, "a Secret removed near the start", s.current())

	added := fleet(3001, 100)
	added.Finished = t0.Add(3 * time.Second)
	s.Record(added)
	checkGzip(t, fmt.Sprintf("%d Secrets", len(added.Inputs.Desired)), s.current())
}
