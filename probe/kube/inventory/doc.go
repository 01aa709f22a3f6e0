// Package inventory reads the desired view of certificates from the Kubernetes API: Secrets (of type
// kubernetes.io/tls, and Opaque or other types laid out by key patterns) and ConfigMaps holding CA
// bundles (e.g. Istio's istio-ca-root-cert).
//
// It is built for clusters with tens of thousands of Secrets, because memory and API-server load
// are what users hold against every peer tool:
//   - the API server filters: a field selector on the Secret type (and namespace exclusions), label
//     selectors, and in namespace-scoped mode one informer per listed namespace, so a
//     ServiceAccount with only namespaced Roles works and nothing is ever listed cluster-wide;
//   - each Secret or ConfigMap is parsed once per add/update, in the informer's transform, into a
//     small immutable summary (fingerprints, validity, issuer, SANs, key match, bundle contents,
//     parse errors naming namespace/name/key); the informer stores hold those summaries, never
//     Secret data, annotations or managedFields;
//   - the initial list is paginated, and each page's response is decoded one object at a time and
//     summarized as it arrives, so only the few Secrets being summarized are alive at once (see
//     probe/kube/internal/listwatch: liststream.go, and listwatch.go for why not WatchList);
//   - objects travel as protobuf.
//
// The summaries are probe/kube's plain types; Inventory.Observations converts them into
// desired.Observation, the desired view the audit judges. Fetch reads by name the Secrets and
// ConfigMaps pods mount or name that the informers do not watch.
package inventory
