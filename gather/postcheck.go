package gather

import (
	"context"
	"net/http"
	"strings"

	"github.com/certdrift/certdrift/audit"
)

// What a repair needs of a Kubernetes session: `audit --reload --yes` passes the audit's own
// session, `serve --remediate` the exporter's, so that no repair starts a second one. The method
// values fit remediate.Observer and remediate.AdminOpener without gather importing remediate.

// GatherEnvoys is the post-check's observation: one round narrowed to what the post-check names
// (PostCheckScope), so that verifying one pod does not observe the whole fleet.
func (s *Session) GatherEnvoys(ctx context.Context, envoys []string) audit.Inputs {
	return s.Gather(ctx, PostCheckScope(envoys))
}

// PostCheckScope is the smallest round that holds every named Envoy ("namespace/pod"): the pod
// itself, else their common namespace (the replacements of a rollout share the workload's), else
// the fleet. A scoped round judges its pods as a fleet round would (Scope).
func PostCheckScope(envoys []string) Scope {
	if len(envoys) == 0 {
		return Fleet
	}
	ns := make([]string, len(envoys))
	for i, e := range envoys {
		n, pod, ok := strings.Cut(e, "/")
		if !ok {
			return Fleet
		}
		if len(envoys) == 1 {
			return OnePod(n, pod)
		}
		ns[i] = n
	}
	for _, n := range ns[1:] {
		if n != ns[0] {
			return Fleet
		}
	}
	return InNamespace(ns[0])
}

// OpenAdminURL reaches a pod's Envoy admin the way the round did (pod IP or port-forward), in the
// shape of remediate.AdminOpener.
func (s *Session) OpenAdminURL(ctx context.Context, namespace, pod string) (string, *http.Client, func(), error) {
	conn, err := s.OpenAdmin(ctx, namespace, pod)
	if err != nil {
		return "", nil, nil, err
	}
	return conn.BaseURL, conn.HTTPClient, conn.Close, nil
}
