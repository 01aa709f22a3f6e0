package remediate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/kubeapi"
)

// PrepareKube reads what planning needs beyond the audit, in Kubernetes mode, and returns the
// inputs Plan is to use with opt filled in:
//   - each stale pod (StaleEnvoys) is read once: a pod gone since the audit is left out of the
//     returned inputs (nothing to reload; Plan then cannot name its owner), and its
//     certdrift.dev/reload-strategy annotation goes to opt.Annotated (discovery keeps no
//     annotations but its own, so this one read stays);
//   - each workload's last reload comes from its record Lease in leaseNS (opt.LastAction).
//
// The owners are the audit's: audit.PodContext.Workload, which discovery resolved (a
// ReplicaSet to its Deployment) while gathering. They are not read again. An Envoy view
// without a pod context has no owner here: the audit of a Kubernetes round always sets it.
func PrepareKube(ctx context.Context, c *kubeapi.Client, leaseNS string, report audit.Report, in audit.Inputs, opt *Options) (audit.Inputs, error) {
	views := map[string]audit.EnvoyView{}
	for _, ev := range in.Envoys {
		views[ev.Config.Name] = ev
	}
	opt.Annotated = map[string]string{}
	out := audit.Inputs{Config: in.Config, Desired: in.Desired}
	var workloads []Workload
	for _, name := range StaleEnvoys(report) {
		ns, podName, ok := strings.Cut(name, "/")
		if !ok {
			continue
		}
		p, err := c.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue // gone since the audit: nothing to reload
		case err != nil:
			return audit.Inputs{}, fmt.Errorf("read pod %s: %w", name, err)
		}
		if v, ok := p.Annotations[StrategyAnnotation]; ok {
			opt.Annotated[name] = v
		}
		ev, ok := views[name]
		if !ok || ev.Pod == nil {
			continue
		}
		out.Envoys = append(out.Envoys, ev)
		if w := ParseWorkload(ev.Pod.Namespace, ev.Pod.Workload); !w.IsZero() && !slices.Contains(workloads, w) {
			workloads = append(workloads, w)
		}
	}
	last, err := lastReloads(ctx, c, leaseNS, workloads)
	if err != nil {
		return audit.Inputs{}, err
	}
	opt.LastAction = last
	return out, nil
}
