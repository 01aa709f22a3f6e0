package exporter

import (
	"fmt"
	"testing"

	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/probe/kube"
)

// TestShardSplitsProbes checks that --shard/--total-shards split the pods to probe without
// overlap or gap, and that each replica probes exactly the pods it exposes.
func TestShardSplitsProbes(t *testing.T) {
	var targets []kube.EnvoyTarget
	for i := range 300 {
		targets = append(targets, kube.EnvoyTarget{Namespace: fmt.Sprintf("ns-%d", i%7), Pod: fmt.Sprintf("gw-%d", i)})
	}
	cases := map[string]struct {
		reason string
		total  int
	}{
		"OneShard":     {reason: "a single replica probes every pod", total: 1},
		"TwoShards":    {reason: "two replicas split the pods", total: 2},
		"FiveShards":   {reason: "five replicas split the pods", total: 5},
		"MoreThanPods": {reason: "more shards than some namespaces' pods still cover all", total: 64},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			probedBy := map[string][]int{}
			for shard := range tc.total {
				keep := PodShard(collector.Shard{Index: shard, Total: tc.total})
				if tc.total == 1 && keep != nil {
					t.Fatalf("%s: want no filter with one shard", tc.reason)
				}
				exposed := collector.Shard{Index: shard, Total: tc.total}
				for _, tg := range keptBy(targets, keep) {
					probedBy[tg.Key()] = append(probedBy[tg.Key()], shard)
					if !exposed.Owns(tg.Key()) {
						t.Errorf("%s: shard %d probes %s but does not expose it", tc.reason, shard, tg.Key())
					}
				}
			}
			for _, tg := range targets {
				if got := probedBy[tg.Key()]; len(got) != 1 {
					t.Errorf("%s: %s probed by shards %v, want exactly one", tc.reason, tg.Key(), got)
				}
			}
			if tc.total > 1 {
				// The split must actually split: with 300 pods no shard of a few may hold them all.
				for shard := range min(tc.total, 5) {
					n := len(keptBy(targets, PodShard(collector.Shard{Index: shard, Total: tc.total})))
					if n == len(targets) || (tc.total <= 5 && n == 0) {
						t.Errorf("%s: shard %d probes %d of %d pods", tc.reason, shard, n, len(targets))
					}
				}
			}
		})
	}
}

// keptBy is what gather.KubeOptions.Shard keeps of targets (all of them when keep is nil).
func keptBy(targets []kube.EnvoyTarget, keep func(namespace, pod string) bool) []kube.EnvoyTarget {
	var out []kube.EnvoyTarget
	for _, t := range targets {
		if keep == nil || keep(t.Namespace, t.Pod) {
			out = append(out, t)
		}
	}
	return out
}
