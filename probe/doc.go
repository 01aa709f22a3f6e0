// Package probe is the observation layer of certdrift. Each sub-package reads one source and
// returns plain data for the audit package to judge:
//
//   - files: the desired view from certificate files and kubelet-layout Secret volumes, returned
//     as desired values: plain data that probe/kube's Secret and ConfigMap summaries also convert
//     into, and which is what the audit imports;
//   - envoyadmin: the loaded view from an Envoy admin endpoint (/certs, /config_dump, /stats),
//     returned as envoystate values: plain data without the HTTP client, which is what the audit
//     imports;
//   - tlsprobe: the served view from a live TLS handshake.
//
// Probes never decide whether what they saw is right; they only report it, with errors that name
// the file, field or endpoint.
package probe
