package remediate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// adminServer records the admin paths posted to it, as an Envoy admin would receive them.
type adminServer struct {
	mu    sync.Mutex
	posts []string
}

func (s *adminServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	s.posts = append(s.posts, r.URL.RequestURI())
	w.WriteHeader(http.StatusOK)
}

// recorder is a Recorder that keeps "strategy outcome attempted" lines.
type recorder struct{ lines []string }

func (r *recorder) ReloadAction(strategy, outcome string, attempted bool, _ time.Time) {
	r.lines = append(r.lines, fmt.Sprintf("%s %s %v", strategy, outcome, attempted))
}

func TestExecutorRun(t *testing.T) {
	srv := &adminServer{}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	quit := func(name, src string) Action {
		return Action{Strategy: AdminQuit, Target: Target{Envoy: name, AdminURL: hs.URL}, Sources: []string{src}, Why: "stale"}
	}
	failing := func(name, src string) Action {
		return Action{Strategy: Exec, Target: Target{Envoy: name}, Sources: []string{src}, Why: "stale"}
	}
	cases := map[string]struct {
		reason    string
		actions   []Action
		dryRun    bool
		command   []string
		verifyErr error
		want      []string
		wantPosts []string
	}{
		"DryRun": {
			reason:  "a preview touches nothing",
			actions: []Action{quit("edge-1", "web"), {Target: Target{Envoy: "edge-2"}, Skip: SkipBudget, Why: "budget"}},
			dryRun:  true,
			want:    []string{OutcomePlanned, "skipped/budget"},
		},
		"AdminQuitDrainsThenQuits": {
			reason:    "drain gracefully, then quit, and the post-check passes",
			actions:   []Action{quit("edge-1", "web")},
			want:      []string{OutcomeDone},
			wantPosts: []string{"/drain_listeners?graceful", "/quitquitquit"},
		},
		"PostCheckFailureStopsSameSource": {
			reason:    "after a failed post-check no more Envoys are restarted onto the same certificate (earlier_failure, not bad_secret: the Secret may be fine); others still are",
			actions:   []Action{quit("edge-1", "web"), quit("edge-2", "web"), quit("edge-3", "api")},
			verifyErr: errors.New("still serves the old leaf"),
			want:      []string{"failed(post_check_failed)", "skipped/earlier_failure", "failed(post_check_failed)"},
			wantPosts: []string{"/drain_listeners?graceful", "/quitquitquit", "/drain_listeners?graceful", "/quitquitquit"},
		},
		"ExecFailure": {
			reason:  "a failing command is a failed action, and no post-check runs",
			actions: []Action{failing("edge-1", "web")},
			command: []string{"false"},
			want:    []string{OutcomeFailed},
		},
		"ExecNoCommand": {
			reason:  "exec without a command says so",
			actions: []Action{failing("edge-1", "web")},
			want:    []string{OutcomeFailed},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv.mu.Lock()
			srv.posts = nil
			srv.mu.Unlock()
			rec := &recorder{}
			e := &Executor{Timeout: 2 * time.Second, Command: tc.command, Metrics: rec,
				Verify: func(context.Context, Action, []string) (string, error) {
					return "serves the desired leaf", tc.verifyErr
				}}
			rs := e.Run(context.Background(), tc.actions, tc.dryRun)
			var got, wantRec []string
			for _, r := range rs {
				o := r.Outcome
				if r.Skip != "" {
					o += "/" + r.Skip
				}
				if r.Reason != "" {
					o += "(" + r.Reason + ")"
				}
				got = append(got, o)
				attempted := r.Outcome != OutcomePlanned && r.Outcome != OutcomeSkipped
				wantRec = append(wantRec, fmt.Sprintf("%s %s %v", r.Strategy, r.Outcome, attempted))
				if r.Detail == "" {
					t.Errorf("result for %s has no detail", r.Target.Envoy)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: outcomes -want +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(wantRec, rec.lines); diff != "" {
				t.Errorf("%s: every result is counted once -want +got:\n%s", tc.reason, diff)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if diff := cmp.Diff(tc.wantPosts, srv.posts); diff != "" {
				t.Errorf("%s: admin posts -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
