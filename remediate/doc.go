// Package remediate makes stale Envoys pick up their new certificate, and only those: it plans
// actions from an audit report (Plan, pure and unit-tested), then carries them out one at a time
// through a strategy — the Eviction API, a rollout restart of the owner, Envoy's admin
// /quitquitquit under a supervisor, or a configured command — with the guards that keep a repair
// from becoming an outage: dry run by default, a budget per run, a cooldown per workload, PDBs
// honoured, one pod of a workload at a time, an Event for each action, and a post-check that the
// new process serves the desired certificate before the next action. Across runs and replicas
// (state.go, guard.go): every action first checks that the workload's last action ended verified
// and that at least replicas − 1 pods stay Ready; an action whose replacement is not verified is
// recorded in the workload's Lease and blocks it until it is healthy again or a person clears it.
//
// It acts only on findings that prove drift past the grace period (STALE_SERVED, STALE_LOADED,
// STALE_PROCESS, REPLICA_DIVERGENCE naming a pod), and never when the Secret itself is the
// problem (KEY_MISMATCH, ROTATION_FAILED, ...): restarting an Envoy onto a certificate it rejects
// turns drift into an outage, and restarting it again would loop.
//
// `audit --reload` plans and executes once and prints the results (RenderTable, RenderJSON);
// `serve --remediate` hands every complete round to a Remediator, which acts in the replica
// elected through Continuous only. Neither reaches the Kubernetes session other than through
// an Observer (the post-check's round) and an AdminOpener, so repair imports no observation
// package.
package remediate
