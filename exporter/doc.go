// Package exporter is `certdrift serve` without its flags: rounds of gather and audit on their
// own schedule (an interval with jitter, early after debounced Kubernetes changes, after a
// configuration reload), each recorded in the collector's store and offered to repair; Secret
// changes applied to the desired view between rounds (the desired-update queue); the metrics
// and probe ports (landing page, /metrics under a scrape limit, /-/healthy, /-/ready,
// /-/reload) with their connection limits and a bounded shutdown; and Check, the client side of
// `certdrift healthcheck`.
//
// It wires the packages below it and owns no rule of its own: observing is gather's, judging
// audit's, exposing collector's and repairing remediate's. cmd/certdrift fills Options from
// flags and handles signals and exit codes; nothing else imports this package.
package exporter
