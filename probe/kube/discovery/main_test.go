package discovery

import (
	"os"
	"testing"

	"github.com/certdrift/certdrift/test/testbed"
)

// One control plane serves every test of the package (each test uses its own namespaces); it
// starts on first use, so the annotation parser tests run without it.
var bed = testbed.Shared{Options: testbed.Options{}}

func TestMain(m *testing.M) { os.Exit(bed.Main(m)) }

// controlPlane returns the package's shared testbed; without its binaries the test fails saying
// how to build them.
func controlPlane(t testing.TB) *testbed.Testbed {
	t.Helper()
	return bed.Get(t)
}
