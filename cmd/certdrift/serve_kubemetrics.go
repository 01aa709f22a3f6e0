package main

import (
	"context"
	"strconv"
	"sync/atomic"

	clientmetrics "k8s.io/client-go/tools/metrics"

	"github.com/certdrift/certdrift/collector"
)

// kubeErrorStore receives client-go's request results. client-go takes its metric hooks once per
// process (metrics.Register is guarded by a sync.Once), so the hook is registered once and points
// at the current exporter's store.
var (
	kubeErrorStore    atomic.Pointer[collector.Store]
	kubeErrorHookOnce atomic.Bool
)

type kubeResultHook struct{}

// Increment is called by client-go for every request with the response code, or "<error>" when
// no response came back.
func (kubeResultHook) Increment(_ context.Context, code, _, _ string) {
	s := kubeErrorStore.Load()
	if s == nil {
		return
	}
	n, err := strconv.Atoi(code)
	switch {
	case err != nil:
		s.KubernetesRequestError("error")
	case n >= 400:
		s.KubernetesRequestError(code)
	}
}

func countKubeErrors(s *collector.Store) {
	kubeErrorStore.Store(s)
	if kubeErrorHookOnce.CompareAndSwap(false, true) {
		clientmetrics.Register(clientmetrics.RegisterOpts{RequestResult: kubeResultHook{}})
	}
}
