package kube

import (
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
)

// ChangeOp is what happened to a summary.
type ChangeOp string

// Change operations.
const (
	Added   ChangeOp = "added"
	Updated ChangeOp = "updated"
	Deleted ChangeOp = "deleted"
)

// Change is passed to Options.OnChange once the store reflects it, so a Snapshot taken inside the
// hook already shows it. Exactly one of Secret and ConfigMap is set; on Deleted it is the last
// known summary.
type Change struct {
	Op        ChangeOp
	Kind      string // "Secret" or "ConfigMap"
	Namespace string
	Name      string
	Secret    *SecretSummary
	ConfigMap *ConfigMapSummary
	// Initial marks an Added that belongs to the informer's first list. Those arrive on the
	// handler goroutine after WaitSynced returned (client-go delivers notifications
	// asynchronously), so a consumer that already reads the whole inventory once it is synced
	// can ignore them instead of treating 10,000 of them as fresh changes.
	Initial bool
}

func (inv *Inventory) handler(s *source) cache.ResourceEventHandler {
	notify := func(op ChangeOp, obj any, initial bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		c := Change{Op: op, Kind: s.kind, Initial: initial}
		switch e := obj.(type) {
		case *secretEntry:
			c.Namespace, c.Name, c.Secret = e.Summary.Namespace, e.Summary.Name, e.Summary
			if op == Deleted {
				inv.changes.forget(secretKind, e.Summary.Namespace, e.Summary.Name, e.Summary.UID)
			}
		case *configMapEntry:
			c.Namespace, c.Name, c.ConfigMap = e.Summary.Namespace, e.Summary.Name, e.Summary
			if op == Deleted {
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
		AddFunc: func(obj any, isInInitialList bool) { notify(Added, obj, isInInitialList) },
		UpdateFunc: func(oldObj, newObj any) {
			if sameVersion(oldObj, newObj) {
				return
			}
			notify(Updated, newObj, false)
		},
		DeleteFunc: func(obj any) { notify(Deleted, obj, false) },
	}
}

func sameVersion(a, b any) bool {
	type rv interface{ GetResourceVersion() string }
	x, ok1 := a.(rv)
	y, ok2 := b.(rv)
	return ok1 && ok2 && x.GetResourceVersion() == y.GetResourceVersion()
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
}

type stats struct {
	mu            sync.Mutex
	secrets       map[string]int64
	configMaps    atomic.Int64
	listRequests  atomic.Int64
	listedObjects atomic.Int64
	events        atomic.Int64
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
		ListRequests: inv.stats.listRequests.Load(), ListedObjects: inv.stats.listedObjects.Load(), Events: inv.stats.events.Load()}
}
