// Package kube holds the Kubernetes facts certdrift observes, as plain data: the desired view's
// summaries of Secrets and ConfigMaps (SecretSummary, ConfigMapSummary, Snapshot, Change) and
// their conversion into the observations the audit judges, and the facts of each Envoy pod
// (EnvoyTarget: owner, presets, ports, volumes and mounts) with the Secrets and ConfigMaps it
// mounts or names (MountedRefs).
//
// It links no Kubernetes client, so that the judgement (audit, audit/bind) can read these types
// without client-go (TestFactsDependencies). The clients that produce them live below it, imports
// flowing one way (each imports this package, none imports another):
//   - probe/kube/inventory: the Secret/ConfigMap inventory (list/watch with streamed pages,
//     transform into summaries, GC pacing, read by name);
//   - probe/kube/discovery: Envoy pods found by preset, label and annotation, owners resolved;
//   - probe/kube/adminaccess: the route to each Envoy's admin, direct or through the API
//     server's port-forward (a session pool per pod).
//
// probe/kube/internal/listwatch is the paged list/watch machinery the inventory and discovery
// share.
package kube
