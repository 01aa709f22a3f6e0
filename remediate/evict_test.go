package remediate

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/kubeapi"
)

// evictServer answers eviction POSTs with the given statuses in turn (the last one repeats)
// and records every request it received: the count shows whether client-go retried on its own.
type evictServer struct {
	mu       sync.Mutex
	statuses []int
	paths    []string
	bodies   []string
}

const pdbRefusal = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Cannot evict pod as it would violate the pod's disruption budget.","reason":"TooManyRequests","details":{"causes":[{"reason":"DisruptionBudget","message":"The disruption budget web needs 2 healthy pods and has 2 currently"}],"retryAfterSeconds":1},"code":429}`

func (s *evictServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	i := len(s.paths)
	b, _ := io.ReadAll(r.Body)
	s.paths = append(s.paths, r.Method+" "+r.URL.Path)
	s.bodies = append(s.bodies, string(b))
	code := s.statuses[min(i, len(s.statuses)-1)]
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch code {
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(code)
		io.WriteString(w, pdbRefusal)
	case http.StatusCreated:
		w.WriteHeader(code)
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success","code":201}`)
	default:
		w.WriteHeader(code)
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden","reason":"Forbidden","code":403}`)
	}
}

func TestEvictPod(t *testing.T) {
	cases := map[string]struct {
		reason      string
		statuses    []int
		refusalWait time.Duration
		wantTries   int
		wantSleeps  int
		wantRefused bool
		wantErr     bool
	}{
		"Accepted": {
			reason:   "one request, no retry",
			statuses: []int{201}, refusalWait: 10 * time.Second, wantTries: 1,
		},
		"RefusedOnceThenAccepted": {
			reason:   "a 429 is retried by us after its Retry-After, not by client-go",
			statuses: []int{429, 201}, refusalWait: 10 * time.Second, wantTries: 2, wantSleeps: 1,
		},
		"RefusedUntilDeadline": {
			reason:   "a PDB that allows nothing is a refusal once the wait is spent; exactly one request per try",
			statuses: []int{429}, refusalWait: 2500 * time.Millisecond, wantTries: 3, wantSleeps: 2, wantRefused: true, wantErr: true,
		},
		"RefusedNoWait": {
			reason:   "with no wait allowed, the first refusal is reported at once",
			statuses: []int{429}, refusalWait: 0, wantTries: 1, wantRefused: true, wantErr: true,
		},
		"Forbidden": {
			reason:   "other errors are failures, not refusals",
			statuses: []int{403}, refusalWait: 10 * time.Second, wantTries: 1, wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv := &evictServer{statuses: tc.statuses}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			c, err := kubeapi.NewForConfig(&rest.Config{Host: hs.URL})
			if err != nil {
				t.Fatal(err)
			}
			sleeps := 0
			sleep := func(context.Context, time.Duration) error { sleeps++; return nil }
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tries, err := evictWithClock(ctx, c, "ns", "web-a", tc.refusalWait, sleep)
			if time.Since(start) > 3*time.Second {
				t.Errorf("EvictPod took %s: client-go retried on its own", time.Since(start))
			}
			var refused *RefusedError
			if got := errors.As(err, &refused); got != tc.wantRefused {
				t.Errorf("%s: refused = %v (err %v), want %v", tc.reason, got, err, tc.wantRefused)
			}
			if (err != nil) != tc.wantErr {
				t.Errorf("%s: err = %v, want error %v", tc.reason, err, tc.wantErr)
			}
			if refused != nil && !strings.Contains(refused.Message, "disruption budget") {
				t.Errorf("refusal message %q does not name the disruption budget", refused.Message)
			}
			if tries != tc.wantTries || sleeps != tc.wantSleeps {
				t.Errorf("%s: tries %d sleeps %d, want %d and %d", tc.reason, tries, sleeps, tc.wantTries, tc.wantSleeps)
			}
			want := make([]string, tc.wantTries)
			for i := range want {
				want[i] = "POST /api/v1/namespaces/ns/pods/web-a/eviction"
			}
			if diff := cmp.Diff(want, srv.paths); diff != "" {
				t.Errorf("%s: requests -want +got:\n%s", tc.reason, diff)
			}
			for _, b := range srv.bodies {
				if !strings.Contains(b, `"kind":"Eviction"`) || !strings.Contains(b, `"apiVersion":"policy/v1"`) {
					t.Errorf("request body is not a policy/v1 Eviction: %s", b)
				}
			}
		})
	}
}

// evictWithClock runs EvictPod with a fake clock that sleeps advance, so the refusal path is
// tested without waiting seconds.
func evictWithClock(ctx context.Context, c *kubeapi.Client, ns, name string, wait time.Duration, sleep func(context.Context, time.Duration) error) (int, error) {
	clock := time.Now()
	return EvictPod(ctx, c, ns, name, EvictOptions{RefusalWait: wait, Now: func() time.Time { return clock },
		Sleep: func(ctx context.Context, d time.Duration) error { clock = clock.Add(d); return sleep(ctx, d) }})
}
