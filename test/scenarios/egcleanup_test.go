package scenarios

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/test/testbed"
)

// cleanupEGObjects registers a cleanup that deletes the objects of manifest and, in
// envoy-gateway-system, the Deployments, Services and pods each selector matches, then waits
// until no such pod is left. The package's scenarios share one cluster and that namespace, and
// an audit of it sees every proxy there: none may outlive its scenario. The control plane may
// already be stopped when this runs (cleanups run last first), so the objects it made are
// deleted here rather than left to it.
func cleanupEGObjects(t *testing.T, manifest string, selectors ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := tb.Kubectl(ctx, "delete", "--ignore-not-found", "--wait=false", "-f", manifest); err != nil {
			t.Errorf("cleanup: %v\n%s", err, out)
		}
		ns := testbed.EnvoyGatewayNamespace
		for _, sel := range selectors {
			if out, err := tb.Kubectl(ctx, "-n", ns, "delete", "deployments,services,pods", "-l", sel, "--ignore-not-found", "--wait=false"); err != nil {
				t.Errorf("cleanup: %v\n%s", err, out)
			}
			poll(ctx, t, "cleanup: no pod left for "+sel, func() error {
				pods, err := tb.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
				if err != nil {
					return err
				}
				if n := len(pods.Items); n > 0 {
					return fmt.Errorf("%d pods left", n)
				}
				return nil
			})
		}
	})
}
