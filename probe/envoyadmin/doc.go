// Package envoyadmin observes the loaded view: what an Envoy holds in memory, read from its admin
// endpoint (/certs, /config_dump secrets and listeners, /stats). Responses are decoded with
// encoding/json into structs holding only the fields certdrift reads (wire.go; decode.go says why
// not go-control-plane), ignoring unknown fields so that newer and older Envoys both parse, with a
// size limit and a deadline on every request. What it reads is returned as the plain data types of
// probe/envoystate, which the audit imports without this package's HTTP clients.
//
// Envoy quirks handled here (see DESIGN.md): /certs has no secret names or fingerprints, lists one
// entry per live TLS context (duplicates and stale contexts appear), shows no intermediates and,
// before Envoy 1.40, only the first CA of a trust bundle (1.40 lists every CA of the file, one
// ca_cert entry each: DESIGN.md's "at most one CA" no longer holds), and days_until_expiration is unreliable (0 when under a day or expired, huge in
// old versions) — callers should use Expiration. Serial numbers are kept as integers.
package envoyadmin
