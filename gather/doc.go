// Package gather takes one round: it observes the three views (desired, loaded, served) and
// returns them as audit.Inputs, recording whatever could not be observed instead of failing.
//
// Local reads what a config file describes: desired files and directories, configured Envoy
// admins and TLS endpoints. Session is the Kubernetes mode: it owns the informers (the
// Secret/ConfigMap inventory and Envoy discovery) and the admin transport, keeps them current
// between rounds, and turns each discovered pod into an Envoy the audit judges. The command
// line only maps flags to Options and KubeOptions.
package gather
