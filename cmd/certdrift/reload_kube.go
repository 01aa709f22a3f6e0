package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/remediate"
)

// kubeReload is the Kubernetes side of --reload: a client for the actions, and (with --yes) a
// KubeSession kept open for the post-checks, so each check is one round of the same
// discovery, admin and handshake code the audit used.
type kubeReload struct {
	st      *reloadState
	client  *kubeapi.Client
	session *KubeSession
	log     *slog.Logger
	// leaseNS is certdrift's namespace, where the reload record Leases live.
	leaseNS string
}

func newKubeReload(_ context.Context, st *reloadState, leaseNS string, log *slog.Logger) (*kubeReload, error) {
	c, err := kubeapi.NewForConfig(st.rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &kubeReload{st: st, client: c, session: st.session, log: log, leaseNS: leaseNS}, nil
}

// prepare reads what planning needs from the cluster for each pod with a drift finding: its
// owner (a ReplicaSet resolved to its Deployment), its strategy annotation, and its workload's
// last reload (the cooldown Lease in certdrift's namespace). The pods become the planner's inputs.
func (k *kubeReload) prepare(ctx context.Context, report audit.Report, opt *remediate.Options) error {
	opt.Annotated = map[string]string{}
	var keys, seen []string
	k.st.in = audit.Inputs{}
	for _, f := range report.Findings {
		name := f.Subject.Envoy
		if name == "" || slices.Contains(seen, name) || !hasDrift(report, name) {
			continue
		}
		seen = append(seen, name)
		ns, podName, ok := strings.Cut(name, "/")
		if !ok {
			continue
		}
		p, err := k.client.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue // gone since the audit: nothing to reload
		case err != nil:
			return fmt.Errorf("read pod %s: %w", name, err)
		}
		workload, err := k.owner(ctx, p)
		if err != nil {
			return err
		}
		k.st.in.Envoys = append(k.st.in.Envoys, audit.EnvoyView{Config: config.Envoy{Name: name},
			Pod: &audit.PodContext{Namespace: ns, Pod: podName, Workload: workload}})
		if v, ok := p.Annotations[remediate.StrategyAnnotation]; ok {
			opt.Annotated[name] = v
		}
		if workload != "" {
			key := remediate.Target{Namespace: ns, Workload: workload}.WorkloadKey()
			if !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
	}
	last, err := remediate.LastReloads(ctx, k.client, k.leaseNS, keys)
	if err != nil {
		return err
	}
	opt.LastAction = last
	return nil
}

// owner is the pod's workload, "Kind/name": its controller, or the Deployment that controls its
// ReplicaSet. "" for a bare pod.
func (k *kubeReload) owner(ctx context.Context, p *corev1.Pod) (string, error) {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return "", nil
	}
	if ref.Kind != "ReplicaSet" {
		return ref.Kind + "/" + ref.Name, nil
	}
	rs, err := k.client.AppsV1().ReplicaSets(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read ReplicaSet %s/%s of pod %s: %w", p.Namespace, ref.Name, p.Name, err)
	}
	if d := metav1.GetControllerOf(rs); d != nil {
		return d.Kind + "/" + d.Name, nil
	}
	return "ReplicaSet/" + rs.Name, nil
}

func hasDrift(r audit.Report, envoy string) bool {
	for _, f := range r.Findings {
		if f.Subject.Envoy == envoy && slices.Contains([]audit.Code{audit.StaleServed, audit.StaleLoaded, audit.StaleProcess, audit.ReplicaDivergence}, f.Code) {
			return true
		}
	}
	return false
}

// verify observes the cluster again and checks the given pods serve their desired certificates.
func (k *kubeReload) verify(ctx context.Context, _ remediate.Action, pods []string) (string, error) {
	in := k.session.Gather(ctx)
	rep := audit.Run(in, k.st.policy, time.Now())
	return checkConverged(in, rep, pods)
}

// openAdmin reaches a pod's Envoy admin the way the audit did (pod IP or port-forward).
func (k *kubeReload) openAdmin(ctx context.Context, namespace, pod string) (string, *http.Client, func(), error) {
	snap := k.session.Discovery().Targets(ctx)
	for _, t := range snap.Targets {
		if t.Namespace == namespace && t.Pod == pod {
			conn, err := k.session.dialer.Open(ctx, t)
			if err != nil {
				return "", nil, nil, err
			}
			return conn.BaseURL, conn.HTTPClient, conn.Close, nil
		}
	}
	return "", nil, nil, fmt.Errorf("pod %s/%s is not a discovered Envoy", namespace, pod)
}
