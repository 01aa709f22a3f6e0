package main

import (
	"context"
	"net/http"
	"strings"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/gather"
)

// What the repair needs of a Kubernetes session: `audit --reload --yes` passes the audit's own
// session, `serve --remediate` the exporter's, so that no repair starts a second one.

// observer is the post-check's remediate.Observer in Kubernetes mode: one round of the session,
// narrowed to what the post-check names (postCheckScope), so that verifying one pod does not
// observe the whole fleet.
func observer(s *gather.Session) func(ctx context.Context, envoys []string) audit.Inputs {
	return func(ctx context.Context, envoys []string) audit.Inputs {
		return s.Gather(ctx, postCheckScope(envoys))
	}
}

// postCheckScope is the smallest round that holds every named Envoy ("namespace/pod"): the pod
// itself, else their common namespace (the replacements of a rollout share the workload's), else
// the fleet. A scoped round judges its pods as a fleet round would (gather.Scope).
func postCheckScope(envoys []string) gather.Scope {
	if len(envoys) == 0 {
		return gather.Fleet
	}
	ns := make([]string, len(envoys))
	for i, e := range envoys {
		n, pod, ok := strings.Cut(e, "/")
		if !ok {
			return gather.Fleet
		}
		if len(envoys) == 1 {
			return gather.OnePod(n, pod)
		}
		ns[i] = n
	}
	for _, n := range ns[1:] {
		if n != ns[0] {
			return gather.Fleet
		}
	}
	return gather.InNamespace(ns[0])
}

// openAdmin reaches a pod's Envoy admin the way the audit did (pod IP or port-forward).
func openAdmin(s *gather.Session) func(ctx context.Context, namespace, pod string) (string, *http.Client, func(), error) {
	return func(ctx context.Context, namespace, pod string) (string, *http.Client, func(), error) {
		conn, err := s.OpenAdmin(ctx, namespace, pod)
		if err != nil {
			return "", nil, nil, err
		}
		return conn.BaseURL, conn.HTTPClient, conn.Close, nil
	}
}
