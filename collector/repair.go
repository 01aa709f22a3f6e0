package collector

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Repair metrics live apart from the Store: they count what `certdrift serve --remediate` (and,
// unexposed, `certdrift audit --reload`) did, not what a round observed, so they change when an
// action ends rather than once per round. The label values are closed sets given by the caller
// (remediate's strategies and outcomes): exposition stays independent of remediate, and every
// series is declared at zero so that rate() and increase() see the first action.
var (
	reloadActionsDesc = prometheus.NewDesc("certdrift_reload_actions_total",
		"Reload actions by strategy and outcome (done, refused, failed, skipped, planned), counted once per round that planned them.",
		[]string{"strategy", "outcome"}, nil)
	reloadLastActionDesc = prometheus.NewDesc("certdrift_reload_last_action_timestamp_seconds",
		"When the last reload action that touched an Envoy (outcome done, refused or failed) ended.", nil, nil)
	reloadBlockedDesc = prometheus.NewDesc("certdrift_reload_blocked",
		"1 for each workload on which repair is blocked because an earlier action failed or was never verified (reason), as the leader last saw it.",
		[]string{"namespace", "workload", "reason"}, nil)
)

// BlockedWorkload is a workload on which repair is blocked, and the closed-set reason.
type BlockedWorkload struct {
	Namespace, Workload, Reason string
}

// NoStrategy labels an action for which no strategy could be chosen (no_strategy, bad_strategy).
const NoStrategy = "none"

// RepairMetrics counts reload actions. Safe for concurrent use; a Collector.
type RepairMetrics struct {
	mu         sync.Mutex
	strategies []string
	outcomes   []string
	counts     map[[2]string]uint64
	last       time.Time
	reasons    []string
	blocked    []BlockedWorkload
}

// NewRepairMetrics declares one counter per strategy (plus NoStrategy) and outcome, at zero.
// Acted lists the outcomes that mean an Envoy was touched: they move the last-action time.
func NewRepairMetrics(strategies, outcomes []string) *RepairMetrics {
	m := &RepairMetrics{strategies: append(slices.Clone(strategies), NoStrategy), outcomes: slices.Clone(outcomes),
		counts: map[[2]string]uint64{}}
	for _, s := range m.strategies {
		for _, o := range m.outcomes {
			m.counts[[2]string{s, o}] = 0
		}
	}
	return m
}

// ReloadAction counts one action's outcome; touched says the action reached an Envoy (it was
// carried out, refused or failed), which sets the last-action time to at. A strategy outside
// the declared set counts as NoStrategy; an undeclared outcome is dropped, so that no value
// from outside the closed sets ever becomes a label.
func (m *RepairMetrics) ReloadAction(strategy, outcome string, touched bool, at time.Time) {
	if !slices.Contains(m.strategies, strategy) {
		strategy = NoStrategy
	}
	if !slices.Contains(m.outcomes, outcome) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[[2]string{strategy, outcome}]++
	if touched && at.After(m.last) {
		m.last = at
	}
}

// WithReasons declares the closed set of block reasons; SetBlocked labels any other as
// "unknown", so that no value from outside the set becomes a label.
func (m *RepairMetrics) WithReasons(reasons []string) *RepairMetrics {
	m.reasons = slices.Clone(reasons)
	return m
}

// SetBlocked replaces the set of blocked workloads (a snapshot: a workload no longer blocked
// loses its series).
func (m *RepairMetrics) SetBlocked(b []BlockedWorkload) {
	out := make([]BlockedWorkload, 0, len(b))
	for _, w := range b {
		if !slices.Contains(m.reasons, w.Reason) {
			w.Reason = "unknown"
		}
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blocked = out
}

func (m *RepairMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- reloadActionsDesc
	ch <- reloadLastActionDesc
	ch <- reloadBlockedDesc
}

func (m *RepairMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.strategies {
		for _, o := range m.outcomes {
			ch <- prometheus.MustNewConstMetric(reloadActionsDesc, prometheus.CounterValue, float64(m.counts[[2]string{s, o}]), s, o)
		}
	}
	if !m.last.IsZero() {
		ch <- prometheus.MustNewConstMetric(reloadLastActionDesc, prometheus.GaugeValue, unix(m.last))
	}
	for _, b := range m.blocked {
		ch <- prometheus.MustNewConstMetric(reloadBlockedDesc, prometheus.GaugeValue, 1, b.Namespace, b.Workload, b.Reason)
	}
}
