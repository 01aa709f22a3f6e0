// Package bind owns the binding rules: which desired certificate (a Secret, a ConfigMap bundle,
// a file) an Envoy must load and serve, and where. Probes report facts — a pod's volumes and
// mounts (probe/kube), the paths, SDS names and listeners Envoy reports (probe/envoystate) —
// and this package, with the audit that owns it, decides what they bind.
//
// # Precedence
//
// A binding ties one desired certificate (source, item) to an Envoy. When several rules name
// the same certificate, the first keeps it and later ones only fill in where the Envoy holds it
// (SDS secret name, file) if it did not say. The rules, most trusted first:
//
//  1. Explicit: a config entry (local mode) or the pod annotation certdrift.dev/secrets; a
//     Secret the annotation declares keeps Origin "config" whichever rule below finds it.
//  2. What Envoy reports loading, matched to a desired file: a certificate path in /certs,
//     config_dump or a listener, or the directory a file-based SDS secret watches. In Kubernetes
//     mode the path is matched through the pod's own mounts (LoadedBindings), so a pod never
//     binds another namespace's Secret mounted at the same path.
//  3. SDS names that name a Secret: Istio's kubernetes://[ns/]name and
//     kubernetes-gateway://ns/name, Envoy Gateway's ns/name (SDSBindings), or a name equal to a
//     desired source.
//  4. The pod spec alone: each Secret or CA-bundle ConfigMap mounted into the Envoy container
//     (Bind).
//  5. Trust bundles SDS names resolve to (Istio's -cacert rule).
//  6. Inferred: a loaded leaf with the same DNS names as a desired certificate of the pod's
//     namespace but another serial; always marked Origin "inferred". Only leaves that no binding
//     of rules 1–5 accounts for: a leaf read from one mounted Secret is that Secret's, not an old
//     copy of a sibling Secret issued for the same names. The same holds for a binding whose
//     location the Envoy does not report, judged by the leaves it holds with those names.
//
// Pod applies 2–5 to a Kubernetes pod in that order and returns them as the Envoy's config
// bindings (with rule 1 marked by origin); audit.Run then applies 1, the local-mode forms of 2
// and 3 and rule 6 (audit/bindings.go), keeping the first binding of each certificate.
package bind
