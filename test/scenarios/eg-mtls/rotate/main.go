// Command rotate swaps the eg-mtls scenario's CA the way `certgen --overwrite` does: a new CA,
// new leaves for the Secrets envoy, envoy-gateway and envoy-rate-limit, and ca.crt =
// [newCA, oldCA] with -bundle (the default), [newCA] with -bundle=false. See ../README.md.
//
//	go run ./test/scenarios/eg-mtls/rotate -kubeconfig $KUBECONFIG -namespace eg-mtls -bundle=false
package main

import (
	"os"

	"github.com/certdrift/certdrift/test/scenarios/eg-mtls/certgen"
)

func main() {
	os.Exit(certgen.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
