package testbed

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// podWorker runs one pod, as the kubelet's pod worker does: set up its addresses and volumes,
// start its containers, keep volumes in sync and probes running, post status, and on deletion
// stop the containers within the grace period and remove the pod object for good.
type podWorker struct {
	node            *Node
	uid             types.UID
	namespace, name string
	podIP, localIP  netip.Addr
	dir             string
	log             *slog.Logger

	changed  chan struct{} // a new pod object arrived
	stopNow  chan struct{} // the node is stopping
	stopOnce sync.Once

	mu   sync.Mutex
	pod  *corev1.Pod
	gone bool // the API object is gone (force deletion, namespace cleanup)

	// Owned by run's goroutine.
	startTime    metav1.Time
	containers   []*container
	volumesReady bool
	volumeErr    string
	lastVolSync  time.Time
	conditions   map[corev1.PodConditionType]corev1.PodCondition
	sent         *corev1.PodStatus
	tokens       map[string]cachedToken
	warnedVolume map[string]bool
}

const (
	podTick         = 250 * time.Millisecond
	nodeStopGrace   = 2 * time.Second
	defaultPodGrace = 30 * time.Second
	apiCallTimeout  = 10 * time.Second
)

func newPodWorker(n *Node, pod *corev1.Pod, m byte) *podWorker {
	return &podWorker{
		node: n, uid: pod.UID, namespace: pod.Namespace, name: pod.Name,
		podIP: n.subnet.podIP(m), localIP: n.subnet.localIP(m),
		dir:          filepath.Join(n.Dir, "pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID)),
		log:          n.log.With("pod", pod.Namespace+"/"+pod.Name),
		changed:      make(chan struct{}, 1),
		stopNow:      make(chan struct{}),
		conditions:   map[corev1.PodConditionType]corev1.PodCondition{},
		tokens:       map[string]cachedToken{},
		warnedVolume: map[string]bool{},
	}
}

func (w *podWorker) setPod(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	w.notify()
}

func (w *podWorker) objectGone() {
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
	w.notify()
}

func (w *podWorker) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *podWorker) shutdown() { w.stopOnce.Do(func() { close(w.stopNow) }) }

func (w *podWorker) current() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.gone
}

// ctx is a context for one API call, cancelled when the node stops.
func (w *podWorker) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.node.ctx, apiCallTimeout)
}

func (w *podWorker) run() {
	w.startTime = metav1.Now()
	w.log.Info("pod assigned", "pod_ip", w.podIP.String(), "dir", w.dir)
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		w.log.Error("cannot create pod directory", "err", err)
		return
	}
	tick := time.NewTicker(podTick)
	defer tick.Stop()
	for {
		select {
		case <-w.stopNow:
			w.stopContainers(nodeStopGrace)
			return
		case <-w.changed:
		case <-tick.C:
		}
		pod, gone := w.current()
		if gone || pod.DeletionTimestamp != nil {
			w.terminate(pod, gone)
			return
		}
		if !w.volumesReady || time.Since(w.lastVolSync) >= w.node.syncDelay {
			w.lastVolSync = time.Now()
			w.syncVolumes(pod)
		}
		if w.volumesReady && w.containers == nil {
			w.startContainers(pod)
		}
		for _, c := range w.containers {
			c.probe()
		}
		w.postStatus(pod)
	}
}

func (w *podWorker) syncVolumes(pod *corev1.Pod) {
	ctx, cancel := w.ctx()
	defer cancel()
	err := w.projectVolumes(ctx, pod)
	if err != nil {
		if msg := err.Error(); msg != w.volumeErr {
			w.log.Warn("volume setup failed, will retry", "err", err)
			w.volumeErr = msg
		}
		return
	}
	w.volumeErr = ""
	w.volumesReady = true
	for _, c := range w.containers {
		c.volumesSynced()
	}
}

func (w *podWorker) startContainers(pod *corev1.Pod) {
	w.containers = []*container{}
	// Native sidecars (init containers with restartPolicy Always, as Istio injects) run like
	// containers; other init containers are reported as completed without running: no image
	// the testbed runs needs one.
	for _, spec := range pod.Spec.InitContainers {
		if spec.RestartPolicy != nil && *spec.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			w.containers = append(w.containers, newContainer(w, pod, spec, true))
		}
	}
	for _, spec := range pod.Spec.Containers {
		w.containers = append(w.containers, newContainer(w, pod, spec, false))
	}
	for _, c := range w.containers {
		c.start()
	}
}

func (w *podWorker) stopContainers(grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range w.containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.stop(grace)
		}()
	}
	wg.Wait()
}

// terminate is the kubelet's pod deletion: stop every container (SIGTERM, SIGKILL after the
// grace period the API server recorded), post the final status, then delete the object with
// grace 0 and a UID precondition so that a new pod of the same name is never hit.
func (w *podWorker) terminate(pod *corev1.Pod, gone bool) {
	grace := defaultPodGrace
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	if gone {
		grace = min(grace, nodeStopGrace)
	}
	w.log.Info("stopping pod", "grace", grace.String(), "object_gone", gone)
	w.stopContainers(grace)
	if gone {
		return
	}
	w.postStatus(pod)
	ctx, cancel := w.ctx()
	defer cancel()
	err := w.node.client.CoreV1().Pods(w.namespace).Delete(ctx, w.name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(w.uid)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.log.Warn("final pod delete failed", "err", err)
		return
	}
	w.log.Info("pod deleted")
}

// postStatus sends the pod status when it differs from what was last sent.
func (w *podWorker) postStatus(pod *corev1.Pod) {
	want := w.status(pod)
	if w.sent != nil && reflect.DeepEqual(*w.sent, want) {
		return
	}
	ctx, cancel := w.ctx()
	defer cancel()
	pods := w.node.client.CoreV1().Pods(w.namespace)
	fresh, err := pods.Get(ctx, w.name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			w.log.Warn("get pod for status update", "err", err)
		}
		return
	}
	if fresh.UID != w.uid {
		return
	}
	s := &fresh.Status
	s.Phase, s.HostIP, s.HostIPs = want.Phase, want.HostIP, want.HostIPs
	s.PodIP, s.PodIPs, s.StartTime = want.PodIP, want.PodIPs, want.StartTime
	s.ContainerStatuses, s.InitContainerStatuses = want.ContainerStatuses, want.InitContainerStatuses
	// Keep conditions the agent does not own, such as DisruptionTarget set by an eviction.
	var conds []corev1.PodCondition
	for _, c := range s.Conditions {
		if _, ours := w.conditions[c.Type]; !ours {
			conds = append(conds, c)
		}
	}
	s.Conditions = append(conds, want.Conditions...)
	if _, err := pods.UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			w.log.Warn("update pod status", "err", err)
		}
		return
	}
	w.sent = &want
}

// status computes the pod status the agent owns.
func (w *podWorker) status(pod *corev1.Pod) corev1.PodStatus {
	s := corev1.PodStatus{
		Phase:     corev1.PodPending,
		HostIP:    w.node.HostIP.String(),
		HostIPs:   []corev1.HostIP{{IP: w.node.HostIP.String()}},
		StartTime: &w.startTime,
	}
	if w.volumesReady {
		s.PodIP, s.PodIPs = w.podIP.String(), []corev1.PodIP{{IP: w.podIP.String()}}
	}
	allReady, running, terminated, failed := true, 0, 0, 0
	for _, c := range w.containers {
		cs := c.status()
		if c.init {
			s.InitContainerStatuses = append(s.InitContainerStatuses, cs)
		} else {
			s.ContainerStatuses = append(s.ContainerStatuses, cs)
		}
		allReady = allReady && cs.Ready
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			terminated++
			if cs.State.Terminated.ExitCode != 0 {
				failed++
			}
		}
	}
	for _, spec := range pod.Spec.InitContainers {
		if spec.RestartPolicy == nil || *spec.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			s.InitContainerStatuses = append(s.InitContainerStatuses, w.skippedInitStatus(spec))
		}
	}
	if w.containers == nil {
		allReady = false
		for _, spec := range pod.Spec.Containers {
			s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{
				Name: spec.Name, Image: spec.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: w.volumeErr}},
			})
		}
	}
	n := len(w.containers)
	switch {
	case n > 0 && terminated == n && failed == 0:
		s.Phase = corev1.PodSucceeded
	case n > 0 && terminated == n:
		s.Phase = corev1.PodFailed
	case n > 0:
		// Running while any container runs or is being restarted (CrashLoopBackOff), as the
		// kubelet reports it.
		s.Phase = corev1.PodRunning
	}
	gates := true
	for _, g := range pod.Spec.ReadinessGates {
		gates = gates && hasCondition(pod.Status.Conditions, g.ConditionType)
	}
	w.setCondition(corev1.PodScheduled, true, "")
	w.setCondition(corev1.PodReadyToStartContainers, w.volumesReady, "")
	w.setCondition(corev1.PodInitialized, w.volumesReady, "")
	w.setCondition(corev1.ContainersReady, allReady && w.containers != nil, "ContainersNotReady")
	w.setCondition(corev1.PodReady, allReady && w.containers != nil && gates, "ContainersNotReady")
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized,
		corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		s.Conditions = append(s.Conditions, w.conditions[t])
	}
	return s
}

func hasCondition(conds []corev1.PodCondition, t corev1.PodConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setCondition records a condition, keeping lastTransitionTime until its status changes.
func (w *podWorker) setCondition(t corev1.PodConditionType, ok bool, falseReason string) {
	status, reason := corev1.ConditionTrue, ""
	if !ok {
		status, reason = corev1.ConditionFalse, falseReason
	}
	if old, seen := w.conditions[t]; seen && old.Status == status {
		return
	}
	w.conditions[t] = corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: metav1.Now()}
}

func (w *podWorker) skippedInitStatus(spec corev1.Container) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: spec.Name, Image: spec.Image, ImageID: imageID(spec.Image), Ready: w.volumesReady,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", Message: "testbed node agent: init containers are not run",
			StartedAt: w.startTime, FinishedAt: w.startTime,
		}},
	}
}

// containerLog is the path of a container's log: Envoy's --log-path file for Envoy containers,
// the console (stdout and stderr) file otherwise or before Envoy has written anything.
func (w *podWorker) containerLog(name string) (string, error) {
	dir := filepath.Join(w.dir, "containers", name)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("container %q of pod %s/%s has not started", name, w.namespace, w.name)
	}
	for _, f := range []string{"envoy.log", "console.log"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return filepath.Join(dir, f), nil
		}
	}
	return "", fmt.Errorf("container %q of pod %s/%s has no log yet", name, w.namespace, w.name)
}
