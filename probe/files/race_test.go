package files

import (
	"errors"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
)

// TestReadDuringKubeletSwaps is the reason files resolves ..data once: one goroutine swaps the
// volume between two valid cert/key pairs as fast as it can while another reads. Every
// observation must pair a certificate with its own key; reading tls.crt and tls.key through
// their visible symlinks separately would sometimes pair A's cert with B's key (a false
// KEY_MISMATCH in production).
func TestReadDuringKubeletSwaps(t *testing.T) {
	const swaps = 2000
	root := certs.NewCA(t)
	a := root.Leaf(t, certs.WithDNSNames("a.example.com"))
	b := root.Leaf(t, certs.WithDNSNames("b.example.com"))
	pairs := []map[string][]byte{
		{"tls.crt": a.CertPEM, "tls.key": a.KeyPEM, "ca.crt": root.CertPEM},
		{"tls.crt": b.CertPEM, "tls.key": b.KeyPEM},
	}
	dir := filepath.Join(t.TempDir(), "vol")
	if err := atomicdir.Write(dir, pairs[0]); err != nil {
		t.Fatal(err)
	}

	done, stop := make(chan struct{}), make(chan struct{})
	var writeErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 1; i <= swaps; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := atomicdir.Write(dir, pairs[i%2]); err != nil {
				writeErr = err
				return
			}
			runtime.Gosched()
		}
	}()

	// Stop the swapper before a failing test returns, so that TempDir cleanup does not race it.
	defer wg.Wait()
	defer close(stop)

	seen := map[string]int{}
	reads, unsettled := 0, 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		obs := Read(Source{Dir: dir}, pki.Limits{})
		reads++
		if obs.Err != nil {
			if !errors.Is(obs.Err, ErrUnsettled) {
				t.Fatalf("read %d: unexpected source error: %v", reads, obs.Err)
			}
			unsettled++
			continue
		}
		if len(obs.Items) != 1 {
			t.Fatalf("read %d: %d items, want 1", reads, len(obs.Items))
		}
		it := obs.Items[0]
		if it.ChainErr != nil || it.KeyErr != nil || it.CAErr != nil || it.Key == nil {
			t.Fatalf("read %d of %s: chain=%v key=%v ca=%v hasKey=%v", reads, obs.DataDir, it.ChainErr, it.KeyErr, it.CAErr, it.Key != nil)
		}
		if !pki.KeyMatches(it.Chain[0], it.Key.Public) {
			t.Fatalf("read %d of %s: torn read, key does not match %s", reads, obs.DataDir, it.Chain[0].Subject.CommonName)
		}
		// The CA travels with pair A only, so it must agree with the leaf too.
		if hasCA, isA := len(it.CA) == 1, it.Chain[0].Equal(a.Cert); hasCA != isA {
			t.Fatalf("read %d of %s: leaf A=%v but CA present=%v", reads, obs.DataDir, isA, hasCA)
		}
		seen[it.Chain[0].Subject.CommonName]++
	}
	if writeErr != nil {
		t.Fatalf("swapper: %v", writeErr)
	}
	t.Logf("%d reads during %d swaps: %v, %d unsettled", reads, swaps, seen, unsettled)
	if seen["a.example.com"] == 0 || seen["b.example.com"] == 0 {
		t.Errorf("reads saw only %v: the swaps did not interleave with reads, so the test proved nothing", seen)
	}
	if unsettled*10 > reads {
		t.Errorf("%d of %d reads gave up as unsettled; retries are not converging", unsettled, reads)
	}
}

// TestOversizeRefusedBeforeRead checks that a 50 MB file is refused from its size: reading it
// first would allocate tens of megabytes.
func TestOversizeRefusedBeforeRead(t *testing.T) {
	dir := t.TempDir()
	sparse(t, filepath.Join(dir, "tls.crt"), 50<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	obs := Read(Source{Dir: dir}, pki.Limits{})
	runtime.ReadMemStats(&after)
	if obs.Err != nil || len(obs.Items) != 1 {
		t.Fatalf("Read: err=%v items=%d", obs.Err, len(obs.Items))
	}
	if !errors.Is(obs.Items[0].ChainErr, pki.ErrTooLarge) {
		t.Errorf("ChainErr = %v, want ErrTooLarge", obs.Items[0].ChainErr)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("Read allocated %d bytes for a refused 50 MB file", grew)
	}
}
