// Package discovery finds the Envoys among a cluster's pods and reports their facts as
// kube.EnvoyTarget values: preset, admin and TLS ports, owner, volumes and mounts.
//
// # Which pods are Envoys
//
// Discovery watches Running pods (field selector status.phase=Running, so a pod that stops
// running leaves the store through the watch) and keeps a small EnvoyTarget for each pod that is
// an Envoy; every other pod is reduced to its key. A pod is an Envoy when, in this order:
//
//   - annotation certdrift.dev/preset is "none": never;
//   - annotation certdrift.dev/preset names a preset: that preset;
//   - preset istio: a container (or native sidecar) named istio-proxy, or label istio in
//     (ingressgateway, egressgateway, eastwestgateway), or label gateway.istio.io/managed;
//     admin 15000 on localhost;
//   - preset envoy-gateway: label app.kubernetes.io/managed-by=envoy-gateway or label
//     gateway.envoyproxy.io/owning-gateway-name; admin 19000 on localhost, stats on 19001.
//     Except Envoy Gateway's rate limit (labels managed-by envoy-gateway and
//     app.kubernetes.io/component=ratelimit, no Envoy container): it is no Envoy and loads its
//     certificates once, so it is a no-reload target (below) without needing the annotation;
//     hot-reload "true" on it says otherwise;
//   - preset envoy: a container whose image repository's last path element contains "envoy"
//     (envoyproxy/envoy, envoyproxy/envoy-distroless, a private mirror .../envoy); admin 9901
//     on the pod IP;
//   - preset annotated: annotation certdrift.dev/envoy-admin-port alone;
//   - preset no-reload: no Envoy, but annotation certdrift.dev/hot-reload: "false" (Envoy
//     Gateway's rate limit mounts a Secret and never reloads it). Such a pod has no admin
//     (AdminPort 0, no annotation error); it is audited from its mounts and start time
//     (STALE_PROCESS). The annotation is the opt-in, so it matches whatever presets are enabled.
//
// Only enabled presets match (Options.Presets, default all). The annotations override
// what the preset says:
//
//	certdrift.dev/envoy-admin-port: "9901"              admin on the pod IP, port 9901
//	certdrift.dev/envoy-admin-port: "localhost:15000"   admin on the pod's loopback only
//	                                                    ("127.0.0.1:15000" means the same)
//	certdrift.dev/probe-ports: "8443, 9443/a.example|b.example"
//	    TLS ports to handshake with, comma separated; each port may carry the SNIs to send
//	    after a "/", separated by "|" (a port without SNIs: SNIs come from Envoy's listeners
//	    or the certificate, see issue 4 item 3)
//	certdrift.dev/secrets: "web-tls, other-ns/api-tls"
//	    Secrets this pod must serve, comma separated, "name" (the pod's namespace) or
//	    "namespace/name"
//
// A malformed annotation does not drop the pod: the target keeps the preset's defaults and the
// problem is listed in EnvoyTarget.AnnotationErrors (for a PARSE_ERROR finding).
//
// Server-side filtering: Options.Selectors are label selectors, each its own watch; a
// pod matching any is considered. Without selectors every Running pod is watched (and all but
// Envoys reduced to their key); PresetSelectors lists selectors that cover the Istio and Envoy
// Gateway presets when plain Envoys need no discovery by image.
//
// # Bindings
//
// Discovery reports facts: a pod's volumes (Secret, ConfigMap and projected sources), its mounts
// per container, declared Secrets and ports. What they bind — and handshake endpoints derived
// from them — is decided in package audit/bind, which documents the precedence of every rule;
// MountedRefs lists what a pod mounts or declares, so that inventory.Inventory.Fetch can read by name what
// the informers do not watch.
//
// # RBAC
//
// Discovery needs list and watch on pods (a Role per namespace in namespace-scoped
// mode, like the inventory) and get on replicasets (apps) to name a pod's Deployment; without
// it the Deployment is inferred from the pod-template-hash label and marked Inferred.
package discovery
