package scenarios

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

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
	fmt.Fprintf(os.Stderr, "testbed started in %s\n", tb.StartDuration.Round(10*time.Millisecond))
	code := m.Run()
	if code != 0 {
		tb.DumpLogs(os.Stderr, 40)
	}
	tb.Stop()
	os.Exit(code)
}
