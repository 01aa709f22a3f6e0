// Package envoytest runs real Envoy processes for tests: it finds (or fetches) the Envoy binary
// of the version under test, starts Envoy on loopback with a bootstrap rendered from a template,
// waits until the admin endpoint says it is ready, and stops it when the test ends.
//
// The binary is chosen, in order, by:
//   - CERTDRIFT_ENVOY_BIN: an explicit path;
//   - CERTDRIFT_ENVOY_FROM_PATH=1: the "envoy" on PATH;
//   - CERTDRIFT_ENVOY_VERSION (default DefaultVersion): <repo>/.cache/envoy/<version>/envoy,
//     fetched with scripts/fetch-envoy.sh when the cache lacks it.
//
// CI covers several Envoy versions by running the Envoy-dependent packages once per version with
// a different CERTDRIFT_ENVOY_VERSION (see the Makefile), which keeps test names stable and lets
// `go test` cache each version's result separately.
//
// A test that needs Envoy never skips when it is missing: it fails and says how to get it.
//
// The package also holds bootstrap templates (FileSDSBootstrap, StaticTLSBootstrap) shared with
// certdrift's end-to-end tests, and tests that pin down the Envoy behaviour certdrift relies on
// (file-based SDS reloads, static TLS never reloading, rejected key pairs, mTLS validation).
package envoytest
