package main

import (
	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/remediate"
)

// newRepairMetrics declares the repair counters over remediate's closed sets of strategies and
// outcomes; exposition does not import remediate, so the sets are handed over here.
func newRepairMetrics() *collector.RepairMetrics {
	strategies := make([]string, len(remediate.Strategies))
	for i, s := range remediate.Strategies {
		strategies[i] = string(s)
	}
	return collector.NewRepairMetrics(strategies, remediate.Outcomes).WithReasons(remediate.Reasons)
}
