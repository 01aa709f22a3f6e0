package collector

import (
	"crypto/x509"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/ref"
)

// TestStoreConcurrentUse drives the Store the way certdrift serve does, all at once: rounds
// (Record), informer events between rounds (UpdateDesired), self-health (ConfigReloaded,
// KubernetesRequest) and scrapes in both formats, plain and gzipped. Under `make test-race`
// the race detector checks the locking; without it, every scrape must parse and, once the
// writers stop, text and protobuf scrapes must hold the same series, as after sequential use.
func TestStoreConcurrentUse(t *testing.T) {
	s := NewStore(Options{Now: clock(t0.Add(time.Hour))})
	h := storeHandler(t, s)

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
			s.UpdateDesired([]DesiredUpdate{{Observation: desired.Observation{Ref: ref.Source{Kind: ref.Secret, Namespace: "ns-c", Name: "tls-c"},
				Items: []desired.Item{{Chain: []*x509.Certificate{c}}}}}}, t0.Add(time.Duration(i)*time.Minute+time.Second))
		}
	})
	writers.Go(func() {
		for i := range rounds {
			s.ConfigReloaded(i%3 != 0, t0.Add(time.Duration(i)*time.Second))
			s.KubernetesRequest("503")
			_ = s.Ready()
			_ = s.Tracker()
		}
	})
	for _, accept := range []string{acceptText, acceptProto} {
		for _, enc := range []string{"identity", "gzip"} {
			readers.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-done:
						return
					default:
					}
					tb := goroutineTB{t}
					_, body := scrape(tb, h, accept, enc)
					if accept == acceptText {
						parseText(tb, body)
					} else {
						parseProto(tb, body)
					}
				}
			})
		}
	}
	writers.Wait()
	close(done)
	readers.Wait()

	// Settled: both formats serve the same series (gatherStore compares them).
	mfs := gatherStore(t, s)
	if got := family(mfs, "certdrift_kubernetes_request_errors_total"); len(got) != 1 || got[0].GetCounter().GetValue() != rounds {
		t.Errorf("after %d concurrent KubernetesRequest(503) calls: %v", rounds, got)
	}
	if got := family(mfs, "certdrift_rounds_total"); len(got) != 1 || got[0].GetCounter().GetValue() != rounds+1 {
		t.Errorf("rounds_total after %d rounds: %v", rounds+1, got)
	}
}

// goroutineTB lets the scrape helpers run off the test's goroutine, where Fatal must not be
// called: a failure is reported and ends that goroutine only.
type goroutineTB struct{ testing.TB }

func (g goroutineTB) Fatalf(format string, args ...any) {
	g.Helper()
	g.Errorf(format, args...)
	runtime.Goexit()
}
