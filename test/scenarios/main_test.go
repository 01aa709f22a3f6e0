package scenarios

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/test/testbed"
)

// syncDelay is the node agent's volume sync period: short, so that a rotation reaches the pod
// volumes within seconds instead of the kubelet's minute.
const syncDelay = 2 * time.Second

// tb is the one testbed of this package; every scenario lives in its own namespace.
var tb *testbed.Testbed

func TestMain(m *testing.M) {
	var err error
	tb, err = testbed.Start(context.Background(), testbed.Options{VolumeSyncDelay: syncDelay})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the testbed (build its binaries with scripts/build-kube.sh): %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "testbed started in %s, Envoy paths: %s\n", tb.StartDuration.Round(10*time.Millisecond), tb.EnvoyPaths)
	// certdrift's own namespace, as an install creates it: `audit --reload --yes` keeps its
	// reload records there (its default --reload-lease-namespace) and acts on nothing without it.
	if _, err := tb.Client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "certdrift"}}, metav1.CreateOptions{}); err != nil {
		fmt.Fprintf(os.Stderr, "create namespace certdrift: %v\n", err)
		tb.Stop()
		os.Exit(1)
	}
	code := m.Run()
	if code != 0 {
		tb.DumpLogs(os.Stderr, 40)
	}
	tb.Stop()
	os.Exit(code)
}
