package exporter

import (
	"context"
	"sync/atomic"

	clientmetrics "k8s.io/client-go/tools/metrics"

	"github.com/certdrift/certdrift/collector"
)

// kubeRequestStore receives client-go's request results. client-go takes its metric hooks once per
// process (metrics.Register is guarded by a sync.Once), so the hook is registered once and points
// at the current exporter's store.
var (
	kubeRequestStore    atomic.Pointer[collector.Store]
	kubeRequestHookOnce atomic.Bool
)

type kubeResultHook struct{}

// Increment is called by client-go for every request with the response code, or "<error>" when
// no response came back; the store classifies it (every request counts, failures also as errors).
func (kubeResultHook) Increment(_ context.Context, code, _, _ string) {
	if s := kubeRequestStore.Load(); s != nil {
		s.KubernetesRequest(code)
	}
}

func countKubeRequests(s *collector.Store) {
	kubeRequestStore.Store(s)
	if kubeRequestHookOnce.CompareAndSwap(false, true) {
		clientmetrics.Register(clientmetrics.RegisterOpts{RequestResult: kubeResultHook{}})
	}
}
