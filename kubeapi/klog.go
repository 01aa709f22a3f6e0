package kubeapi

import (
	"log/slog"

	"k8s.io/klog/v2"
)

// RouteKlog sends klog's global output (client-go code that does not log through a context,
// such as API warnings and the REST client) to l. It is process-wide, so the command calls it
// once at start-up; the inventory's and discovery's informers already log through l via their context.
func RouteKlog(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	klog.SetSlogLogger(l)
}
