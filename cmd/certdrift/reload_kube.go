package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/certdrift/certdrift/audit"
)

// What the repair needs of a KubeSession: `audit --reload --yes` passes the audit's own session,
// `serve --remediate` the exporter's, so that no repair starts a second one.

// observe is the post-check's remediate.Observer in Kubernetes mode: one round of the session.
// It observes the whole fleet to verify a few pods; the gather package's one-pod scope
// (issue 17 item 1) replaces it here, behind remediate.Observer.
func (s *KubeSession) observe(ctx context.Context, _ []string) audit.Inputs {
	return s.Gather(ctx)
}

// openAdmin reaches a pod's Envoy admin the way the audit did (pod IP or port-forward).
func (s *KubeSession) openAdmin(ctx context.Context, namespace, pod string) (string, *http.Client, func(), error) {
	snap := s.Discovery().Targets(ctx)
	for _, t := range snap.Targets {
		if t.Namespace == namespace && t.Pod == pod {
			conn, err := s.dialer.Open(ctx, t)
			if err != nil {
				return "", nil, nil, err
			}
			return conn.BaseURL, conn.HTTPClient, conn.Close, nil
		}
	}
	return "", nil, nil, fmt.Errorf("pod %s/%s is not a discovered Envoy", namespace, pod)
}
