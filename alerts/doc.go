// Package alerts ships certdrift's Prometheus alerting rules. certdrift.rules.yaml is the source
// of truth (plain Prometheus rule_files format); packagings such as a PrometheusRule or a Helm
// chart are built from Rules rather than copied, so there is one file to test. The tests run
// promtool on the rules and their unit tests (tests/), check each alert's conventions and
// runbook, and hold every expression to docs/metrics.md and docs/findings.md.
package alerts

import _ "embed"

// Rules is certdrift.rules.yaml.
//
//go:embed certdrift.rules.yaml
var Rules []byte
