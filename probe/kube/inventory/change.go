package inventory

import (
	"sync"
	"sync/atomic"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/listwatch"
	"github.com/certdrift/certdrift/ref"
	"k8s.io/client-go/tools/cache"
)

func (inv *Inventory) handler(s *listwatch.Source) cache.ResourceEventHandler {
	notify := func(op kube.ChangeOp, obj any, initial bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		c := kube.Change{Op: op, Kind: ref.Kind(s.Kind), Initial: initial}
		switch e := obj.(type) {
		case *secretEntry:
			c.Namespace, c.Name, c.Secret = e.Summary.Namespace, e.Summary.Name, e.Summary
			if e.Summary.Stub {
				// No certificates to show: the change still asks for a round, which promotes
				// the stub if this shard judges it (Promote).
				c.Secret = nil
			}
			if op == kube.Deleted {
				inv.changes.forget(secretKind, e.Summary.Namespace, e.Summary.Name, e.Summary.UID)
			}
		case *configMapEntry:
			c.Namespace, c.Name, c.ConfigMap = e.Summary.Namespace, e.Summary.Name, e.Summary
			if op == kube.Deleted {
				inv.changes.forget(configMapKind, e.Summary.Namespace, e.Summary.Name, e.Summary.UID)
			}
		default:
			return
		}
		inv.stats.events.Add(1)
		if inv.opts.OnChange != nil {
			inv.opts.OnChange(c)
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) { notify(kube.Added, obj, isInInitialList) },
		UpdateFunc: func(oldObj, newObj any) {
			if listwatch.SameVersion(oldObj, newObj) {
				return
			}
			notify(kube.Updated, newObj, false)
		},
		DeleteFunc: func(obj any) { notify(kube.Deleted, obj, false) },
	}
}

// Stats count the inventory's work since New.
type Stats struct {
	// SecretsParsed counts Secrets summarized, by Secret type: a type the inventory does not
	// watch never appears here, because the API server filters it out.
	SecretsParsed    map[string]int64
	ConfigMapsParsed int64
	// ListRequests counts list pages requested; ListedObjects the objects they returned.
	ListRequests  int64
	ListedObjects int64
	// Events counts add/update/delete notifications delivered.
	Events int64
	// PromoteRequests counts the Secrets Promote read by name.
	PromoteRequests int64
}

type stats struct {
	mu            sync.Mutex
	secrets       map[string]int64
	configMaps    atomic.Int64
	listRequests  atomic.Int64
	listedObjects atomic.Int64
	events        atomic.Int64
	// promoteRequests counts Promote's reads.
	promoteRequests atomic.Int64
}

func (s *stats) countSecret(typ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.secrets == nil {
		s.secrets = map[string]int64{}
	}
	s.secrets[typ]++
}

func (s *stats) countConfigMap() { s.configMaps.Add(1) }

// Stats returns a copy of the counters.
func (inv *Inventory) Stats() Stats {
	inv.stats.mu.Lock()
	m := make(map[string]int64, len(inv.stats.secrets))
	for k, v := range inv.stats.secrets {
		m[k] = v
	}
	inv.stats.mu.Unlock()
	return Stats{SecretsParsed: m, ConfigMapsParsed: inv.stats.configMaps.Load(),
		ListRequests: inv.stats.listRequests.Load(), ListedObjects: inv.stats.listedObjects.Load(), Events: inv.stats.events.Load(),
		PromoteRequests: inv.stats.promoteRequests.Load()}
}
