package testbed

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// SchedulerUser is the identity the binder acts as. The bootstrap RBAC policy grants it
// pods/binding, as to the real kube-scheduler; a node identity may not bind pods.
const SchedulerUser = "system:kube-scheduler"

// Binder plays the scheduler, as little of it as the testbed needs: every pod without a
// nodeName is bound, through the pods/binding subresource, to the next Ready node (round robin)
// that its nodeSelector and required node affinity allow. There is no resource accounting, no
// taint handling and no preemption; the DaemonSet controller's per-node affinity
// (matchFields metadata.name) is honoured, so DaemonSet pods land where they belong.
type Binder struct {
	client kubernetes.Interface
	log    *slog.Logger
	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
	pods   cache.Indexer
	nodes  cache.Indexer
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	next int // round-robin position
}

// StartBinder starts binding unscheduled pods with client, which must be allowed to create
// pods/binding (the admin, or SchedulerUser). ctx bounds only the start; the binder runs until
// Stop.
func StartBinder(startCtx context.Context, client kubernetes.Interface, log *slog.Logger) (*Binder, error) {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Binder{
		client: client,
		log:    log,
		cancel: cancel,
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](
			50*time.Millisecond, 2*time.Second)),
	}
	unscheduled := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.AndSelectors(
			fields.OneTermEqualSelector("spec.nodeName", ""),
			fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
			fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
		).String()
	}))
	podInformer := unscheduled.Core().V1().Pods().Informer()
	enqueue := func(obj any) {
		if name, err := cache.ObjectToName(obj); err == nil {
			b.queue.Add(name)
		}
	}
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("binder: watch unscheduled pods: %w", err)
	}
	all := informers.NewSharedInformerFactory(client, 0)
	nodeInformer := all.Core().V1().Nodes().Informer()
	// A node that turns Ready may be what a waiting pod needs.
	if _, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { b.requeueAll() },
		UpdateFunc: func(any, any) { b.requeueAll() },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("binder: watch nodes: %w", err)
	}
	b.pods, b.nodes = podInformer.GetIndexer(), nodeInformer.GetIndexer()
	unscheduled.Start(ctx.Done())
	all.Start(ctx.Done())
	if !cache.WaitForCacheSync(startCtx.Done(), podInformer.HasSynced, nodeInformer.HasSynced) {
		cancel()
		b.queue.ShutDown()
		return nil, fmt.Errorf("binder: pod and node caches did not sync: %w", startCtx.Err())
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for b.work(ctx) {
		}
	}()
	go func() {
		<-ctx.Done()
		b.queue.ShutDown()
	}()
	return b, nil
}

// Stop stops binding and waits for the worker.
func (b *Binder) Stop() {
	b.cancel()
	b.queue.ShutDown()
	b.wg.Wait()
}

func (b *Binder) requeueAll() {
	for _, key := range b.pods.ListKeys() {
		if name, err := cache.ParseObjectName(key); err == nil {
			b.queue.Add(name)
		}
	}
}

func (b *Binder) work(ctx context.Context) bool {
	name, quit := b.queue.Get()
	if quit {
		return false
	}
	defer b.queue.Done(name)
	err := b.bind(ctx, name)
	if err == nil {
		b.queue.Forget(name)
		return true
	}
	if ctx.Err() == nil {
		b.log.Info("binder: will retry", "pod", name.String(), "err", err)
		b.queue.AddRateLimited(name)
	}
	return true
}

func (b *Binder) bind(ctx context.Context, name cache.ObjectName) error {
	obj, ok, err := b.pods.GetByKey(name.String())
	if err != nil || !ok {
		return nil // bound or deleted since
	}
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil || pod.Spec.NodeName != "" {
		return nil
	}
	node, err := b.pick(pod)
	if err != nil {
		return err
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = b.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	switch {
	case err == nil:
		b.log.Info("binder: bound pod", "pod", name.String(), "node", node)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // deleted, or bound by someone else: the informer will tell
	default:
		return fmt.Errorf("bind pod %s to node %s: %w", name, node, err)
	}
}

// pick chooses the next Ready node, in name order, that the pod may run on.
func (b *Binder) pick(pod *corev1.Pod) (string, error) {
	var fit []string
	for _, obj := range b.nodes.List() {
		n := obj.(*corev1.Node)
		if nodeReady(n) && n.DeletionTimestamp == nil && !n.Spec.Unschedulable && podFitsNode(pod, n) {
			fit = append(fit, n.Name)
		}
	}
	if len(fit) == 0 {
		return "", fmt.Errorf("no Ready node matches the nodeSelector and node affinity of pod %s/%s", pod.Namespace, pod.Name)
	}
	slices.Sort(fit)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	return fit[b.next%len(fit)], nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFitsNode checks spec.nodeSelector and the required node affinity terms (ORed; within a
// term, expressions and fields are ANDed), the two constraints the workload controllers set.
func podFitsNode(pod *corev1.Pod, n *corev1.Node) bool {
	if !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(n.Labels)) {
		return false
	}
	aff := pod.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
			continue // an empty term matches nothing
		}
		if requirementsMatch(term.MatchExpressions, func(key string) (string, bool) {
			v, ok := n.Labels[key]
			return v, ok
		}) && requirementsMatch(term.MatchFields, func(key string) (string, bool) {
			return n.Name, key == "metadata.name"
		}) {
			return true
		}
	}
	return false
}

func requirementsMatch(reqs []corev1.NodeSelectorRequirement, get func(string) (string, bool)) bool {
	for _, r := range reqs {
		v, ok := get(r.Key)
		var match bool
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			match = ok && slices.Contains(r.Values, v)
		case corev1.NodeSelectorOpNotIn:
			match = !ok || !slices.Contains(r.Values, v)
		case corev1.NodeSelectorOpExists:
			match = ok
		case corev1.NodeSelectorOpDoesNotExist:
			match = !ok
		default: // Gt and Lt: no workload the testbed runs uses them
			match = false
		}
		if !match {
			return false
		}
	}
	return true
}
