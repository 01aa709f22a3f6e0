package collector

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/certdrift/certdrift/probe/files"
)

// TestStoreConcurrentUse drives the Store the way certdrift serve does, all at once: rounds
// (Record), informer events between rounds (UpdateDesired), self-health (ConfigReloaded,
// KubernetesRequestError) and scrapes of both paths (cached text, and the registry behind the
// protobuf fallback). Under `make race` the race detector checks the locking; without it, every
// scrape must still succeed and, once the writers stop, the cached text must hold what promhttp
// renders from the store, as after sequential use.
func TestStoreConcurrentUse(t *testing.T) {
	s := NewStore(Options{Now: clock(t0.Add(time.Hour))})
	reg, err := s.Registry()
	if err != nil {
		t.Fatal(err)
	}
	registry := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	h, err := s.Handler(registry, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(accept string) (int, string) {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	const text, proto = "text/plain;version=0.0.4", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"

	const rounds = 20
	s.Record(kubeRound(t0, true))
	var writers, readers sync.WaitGroup
	done := make(chan struct{})
	writers.Go(func() {
		for i := range rounds {
			s.Record(kubeRound(t0.Add(time.Duration(i+1)*time.Minute), i%2 == 0))
		}
	})
	writers.Go(func() {
		for i := range rounds {
			c := cert(fmt.Sprintf("rotated-%d", i), int64(100+i))
			s.UpdateDesired([]DesiredUpdate{{Observation: files.Observation{Source: files.Source{Name: "ns-c/tls-c"},
				Items: []files.Item{{Chain: []*x509.Certificate{c}}}}}}, t0.Add(time.Duration(i)*time.Minute+time.Second))
		}
	})
	writers.Go(func() {
		for i := range rounds {
			s.ConfigReloaded(i%3 != 0, t0.Add(time.Duration(i)*time.Second))
			s.KubernetesRequestError("503")
			_ = s.Ready()
		}
	})
	for _, accept := range []string{text, proto} {
		readers.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				if code, body := scrape(accept); code != http.StatusOK || body == "" {
					t.Errorf("scrape %d (%s) while the store changed: HTTP %d, %d bytes", n, accept, code, len(body))
					return
				}
			}
		})
	}
	writers.Wait()
	close(done)
	readers.Wait()

	// Settled: the fast path serves exactly the series the registry holds.
	rec := httptest.NewRecorder()
	registry.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := string(dropEmptyLabels(rec.Body.Bytes()))
	code, got := scrape(text)
	if code != http.StatusOK {
		t.Fatalf("scrape after the writers stopped: HTTP %d", code)
	}
	if diff := cmp.Diff(sortedLines(want), sortedLines(got)); diff != "" {
		t.Errorf("after concurrent use the cached text differs from the registry (-registry +cached):\n%s", diff)
	}
	if wantErrs := fmt.Sprintf(`certdrift_kubernetes_request_errors_total{code="503"} %d`, rounds); !strings.Contains(got, wantErrs+"\n") {
		t.Errorf("scrape after %d concurrent KubernetesRequestError calls lacks %q", rounds, wantErrs)
	}
}
