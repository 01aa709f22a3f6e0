package remediate

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certdrift/certdrift/kubeapi"
)

// RestartedAtAnnotation is the pod-template annotation `kubectl rollout restart` sets; setting
// it the same way makes the restart look familiar in `kubectl rollout history`.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// pollInterval paces the waits for replacement pods and rollouts.
const pollInterval = 500 * time.Millisecond

// controllerUID is the UID of the pod's controlling owner (its ReplicaSet, DaemonSet or
// StatefulSet): the replacement of an evicted pod has the same one.
func controllerUID(p *corev1.Pod) types.UID {
	if ref := metav1.GetControllerOf(p); ref != nil {
		return ref.UID
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// siblings are the pods with the same controller as p, by UID.
func siblings(ctx context.Context, c *kubeapi.Client, p *corev1.Pod) ([]corev1.Pod, error) {
	owner := controllerUID(p)
	list, err := c.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods in %s: %w", p.Namespace, err)
	}
	var out []corev1.Pod
	for _, q := range list.Items {
		if owner != "" && controllerUID(&q) == owner {
			out = append(out, q)
		}
	}
	return out, nil
}

// waitReplaced waits until the pod with UID old is gone and a pod of the same controller that
// did not exist before (by UID) is Ready; it returns the new pods' "namespace/name".
func waitReplaced(ctx context.Context, c *kubeapi.Client, p *corev1.Pod, before map[types.UID]bool) ([]string, error) {
	var last string
	for {
		sib, err := siblings(ctx, c, p)
		if err != nil {
			last = err.Error()
		} else {
			oldGone := true
			var fresh []string
			for _, q := range sib {
				if q.UID == p.UID {
					oldGone = false
				}
				if !before[q.UID] && podReady(&q) {
					fresh = append(fresh, q.Namespace+"/"+q.Name)
				}
			}
			if oldGone && len(fresh) > 0 {
				return fresh, nil
			}
			last = fmt.Sprintf("evicted pod gone: %v, new Ready pods: %d", oldGone, len(fresh))
		}
		if err := sleepCtx(ctx, pollInterval); err != nil {
			return nil, fmt.Errorf("wait for the replacement of %s/%s (%s): %w", p.Namespace, p.Name, last, err)
		}
	}
}

// waitRestarted waits until the Envoy container of namespace/name restarted (its restart count
// grew) and the pod is Ready again: what a supervisor (the kubelet) does after /quitquitquit.
func waitRestarted(ctx context.Context, c *kubeapi.Client, namespace, name string, restarts int32) error {
	var last string
	for {
		p, err := c.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
		} else if n := totalRestarts(p); n > restarts && podReady(p) {
			return nil
		} else {
			last = fmt.Sprintf("restarts %d, ready %v", totalRestarts(p), podReady(p))
		}
		if err := sleepCtx(ctx, pollInterval); err != nil {
			return fmt.Errorf("wait for pod %s/%s to restart (%s): %w", namespace, name, last, err)
		}
	}
}

func totalRestarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// restartWorkload patches the workload's pod template as `kubectl rollout restart` does and
// returns the generation to wait for.
func restartWorkload(ctx context.Context, c *kubeapi.Client, w Workload, now time.Time) (int64, error) {
	namespace, kind, name := w.Namespace, w.Kind, w.Name
	patch := fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, RestartedAtAnnotation, now.Format(time.RFC3339))
	opts := metav1.PatchOptions{FieldManager: "certdrift"}
	var gen int64
	var err error
	switch kind {
	case "Deployment":
		d, e := c.AppsV1().Deployments(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, opts)
		if e == nil {
			gen = d.Generation
		}
		err = e
	case "DaemonSet":
		d, e := c.AppsV1().DaemonSets(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, opts)
		if e == nil {
			gen = d.Generation
		}
		err = e
	case "StatefulSet":
		d, e := c.AppsV1().StatefulSets(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, opts)
		if e == nil {
			gen = d.Generation
		}
		err = e
	default:
		return 0, fmt.Errorf("rollout restart of %s: not a Deployment, DaemonSet or StatefulSet", w)
	}
	if err != nil {
		return 0, fmt.Errorf("rollout restart of %s: patch pod template: %w", w, err)
	}
	return gen, nil
}

// waitRollout waits until the workload's controller observed generation gen and every replica
// is updated and available, the condition `kubectl rollout status` waits for.
func waitRollout(ctx context.Context, c *kubeapi.Client, w Workload, gen int64) error {
	var last string
	for {
		done, why, err := rolloutDone(ctx, c, w, gen)
		if err != nil {
			last = err.Error()
		} else if done {
			return nil
		} else {
			last = why
		}
		if err := sleepCtx(ctx, pollInterval); err != nil {
			return fmt.Errorf("wait for the rollout of %s (%s): %w", w, last, err)
		}
	}
}

// specReplicas is a workload's desired replica count: 1 when the spec leaves it unset, as the API
// server defaults it.
func specReplicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func rolloutDone(ctx context.Context, c *kubeapi.Client, w Workload, gen int64) (bool, string, error) {
	namespace, name := w.Namespace, w.Name
	switch w.Kind {
	case "Deployment":
		d, err := c.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		want := specReplicas(d.Spec.Replicas)
		s := d.Status
		return s.ObservedGeneration >= gen && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want,
			fmt.Sprintf("%d/%d updated, %d total, %d available", s.UpdatedReplicas, want, s.Replicas, s.AvailableReplicas), nil
	case "DaemonSet":
		d, err := c.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		s := d.Status
		return s.ObservedGeneration >= gen && s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled,
			fmt.Sprintf("%d/%d updated, %d available", s.UpdatedNumberScheduled, s.DesiredNumberScheduled, s.NumberAvailable), nil
	case "StatefulSet":
		d, err := c.AppsV1().StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		want := specReplicas(d.Spec.Replicas)
		s := d.Status
		return s.ObservedGeneration >= gen && s.UpdatedReplicas == want && s.ReadyReplicas == want && s.CurrentRevision == s.UpdateRevision,
			fmt.Sprintf("%d/%d updated, %d ready", s.UpdatedReplicas, want, s.ReadyReplicas), nil
	}
	return false, "", fmt.Errorf("%s: not a Deployment, DaemonSet or StatefulSet", w.Kind)
}

// workloadPods lists the pods a workload owns now, through the pods' controllers (a Deployment
// owns them through ReplicaSets, recognised by the "<deployment>-<hash>" name).
func workloadPods(ctx context.Context, c *kubeapi.Client, w Workload) ([]corev1.Pod, error) {
	kind, name := w.Kind, w.Name
	list, err := c.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods in %s: %w", w.Namespace, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		ref := metav1.GetControllerOf(&p)
		if ref == nil {
			continue
		}
		switch {
		case ref.Kind == kind && ref.Name == name,
			kind == "Deployment" && ref.Kind == "ReplicaSet" && strings.HasPrefix(ref.Name, name+"-") &&
				!strings.Contains(ref.Name[len(name)+1:], "-"):
			out = append(out, p)
		}
	}
	return out, nil
}

// The cooldown is remembered in a coordination.k8s.io Lease per workload, in certdrift's own
// namespace (state.go), renewed at each action. A Lease rather than an annotation on the
// Deployment: writing to the user's workload would show as drift to GitOps tools (Argo CD,
// Flux) and would need patch rights on workloads even for evictions; a Lease needs only
// get/create/update on leases in one namespace, and its renewTime is a timestamp the API server
// already models.

// lastReloads reads when each workload was last acted on (keyed by Workload.String, as
// Target.WorkloadKey), from the record Leases in leaseNS. A missing Lease is no entry, and so is one
// certdrift may not read (an RBAC profile without repair), or no leaseNS at all: a dry run still
// shows its plan, and acting is then refused before anything is disrupted, with the missing
// namespace or permission named (CheckLeaseNamespace). Other errors are returned.
func lastReloads(ctx context.Context, c *kubeapi.Client, leaseNS string, workloads []Workload) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if leaseNS == "" {
		return out, nil
	}
	for _, w := range workloads {
		k := w.String()
		name := LeaseName(w)
		l, err := c.CoordinationV1().Leases(leaseNS).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read reload cooldown lease %s/%s of %s: %w", leaseNS, name, k, err)
		}
		if l.Spec.RenewTime != nil {
			out[k] = l.Spec.RenewTime.Time
		}
	}
	return out, nil
}

// event records a core/v1 Event on the object, so `kubectl describe` shows what certdrift did.
func event(ctx context.Context, c *kubeapi.Client, ref corev1.ObjectReference, warning bool, reason, msg string, now time.Time) error {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	t := metav1.NewTime(now)
	_, err := c.CoreV1().Events(ref.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "certdrift-", Namespace: ref.Namespace},
		InvolvedObject: ref,
		Reason:         reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: "certdrift"},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		ReportingController: "certdrift.dev/remediate", ReportingInstance: "certdrift",
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("record event %s on %s %s/%s: %w", reason, ref.Kind, ref.Namespace, ref.Name, err)
	}
	return nil
}

func podRef(p *corev1.Pod) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}
