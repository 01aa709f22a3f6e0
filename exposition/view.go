package exposition

import (
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// storeView is a consistent copy of what one Collect exposes.
type storeView struct {
	now          time.Time
	snap         *snapshot
	convergence  histogram
	probeTLS     histogram
	probeErrors  map[[2]string]uint64
	kubeErrors   map[string]uint64
	reloadKnown  bool
	reloadOK     bool
	reloadAt     time.Time
	rounds       uint64
	lastComplete time.Time
}

func (h histogram) clone() histogram {
	h.counts = append([]uint64(nil), h.counts...)
	return h
}

// view copies the cumulative state under the lock; the snapshot itself is immutable.
func (s *Store) view() storeView {
	now := s.opt.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return storeView{
		now: now, snap: s.snap,
		convergence: s.convergence.clone(), probeTLS: s.probeTLS.clone(),
		probeErrors: maps.Clone(s.probeErrors), kubeErrors: maps.Clone(s.kubeErrors),
		reloadKnown: s.reloadKnown, reloadOK: s.reloadOK, reloadAt: s.reloadAt,
		rounds: s.rounds, lastComplete: s.lastComplete,
	}
}

func (s *Store) current() *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// Collectors returns the store's collectors: certificates, findings, self-health.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{certificateCollector{s}, findingCollector{s}, healthCollector{s}}
}

// Registry returns a new registry holding only the store's collectors: certdrift's domain
// metrics. go_* and process_* belong in a registry of their own (STYLE.md, "Metrics" 1).
func (s *Store) Registry() (*prometheus.Registry, error) {
	reg := prometheus.NewPedanticRegistry()
	for _, c := range s.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}
