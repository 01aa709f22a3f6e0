// Package dashboards ships certdrift's Grafana dashboards as maintained JSON: the fleet
// overview (certdrift-overview.json) and a per-namespace/Envoy drill-down
// (certdrift-workload.json).
//
// Why maintained JSON and not Go generated with grafana-foundation-sdk: that module is not in
// go.mod and the module proxy available to this project does not serve it, and a dashboard
// exported from Grafana after an edit in its UI is JSON anyway; keeping the JSON as the source
// makes that round trip a plain diff. What a generator would guarantee is checked by the tests
// instead: valid JSON, unique panel ids, a layout inside the 24-column grid without overlaps,
// every panel on the datasource variable, rate() on $__rate_interval, every template variable
// defined, and every query holding only to documented metrics, labels and finding codes (the
// same checker as the alerts, alerts/metricnames).
package dashboards

import "embed"

// Files holds the dashboards, one JSON file each.
//
//go:embed *.json
var Files embed.FS
