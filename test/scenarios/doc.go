// Package scenarios holds runnable Kubernetes scenarios taken from the seed documents: plain
// manifests under one directory each (apply them with kubectl against `make testbed`), and the
// tests that bring each one up on the testbed, check with plain crypto/tls dials what every
// Envoy pod serves, rotate the certificates, and check exactly which pods converge. The tests
// pin down how real Envoys and a real control plane behave, so certdrift's own tests can rely
// on these scenarios.
package scenarios
