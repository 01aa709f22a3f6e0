package discovery

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/probe/kube"
)

// ownerCache resolves ReplicaSets to the Deployments that own them. A ReplicaSet's controller
// never changes, so each is read once; entries no live target refers to are dropped at every
// resolve, which bounds the cache by the number of Envoy ReplicaSets.
type ownerCache struct {
	client *kubeapi.Client
	mu     sync.Mutex
	byRS   map[string]kube.Owner // "ns/replicaset" → owner
}

func newOwnerCache(c *kubeapi.Client) *ownerCache {
	return &ownerCache{client: c, byRS: map[string]kube.Owner{}}
}

// ownerTimeout bounds one ReplicaSet read.
const ownerTimeout = 5 * time.Second

// resolve replaces ReplicaSet owners in targets by their controller (usually a Deployment). A
// ReplicaSet that cannot be read is named as the Deployment its name implies
// ("<deployment>-<pod-template-hash>"), marked Inferred, and the error is returned; a failed
// read is retried at the next resolve.
func (c *ownerCache) resolve(ctx context.Context, targets []kube.EnvoyTarget, now func() time.Time) []kube.SourceError {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []kube.SourceError
	live := map[string]bool{}
	for i := range targets {
		t := &targets[i]
		if t.Owner.Kind != "ReplicaSet" {
			continue
		}
		key := t.Namespace + "/" + t.Owner.Name
		live[key] = true
		if o, ok := c.byRS[key]; ok {
			t.Owner = o
			continue
		}
		o, err := c.read(ctx, t.Namespace, t.Owner.Name)
		if err != nil {
			errs = append(errs, kube.SourceError{Source: "replicasets " + key, At: now(), Err: err})
			t.Owner = inferDeployment(t.Owner.Name)
			continue
		}
		c.byRS[key] = o
		t.Owner = o
	}
	for k := range c.byRS {
		if !live[k] {
			delete(c.byRS, k)
		}
	}
	return errs
}

func (c *ownerCache) read(ctx context.Context, ns, name string) (kube.Owner, error) {
	ctx, cancel := context.WithTimeout(ctx, ownerTimeout)
	defer cancel()
	rs, err := c.client.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return kube.Owner{}, &AccessError{Verb: "get", Resource: "replicasets", Namespace: ns, Err: err}
		}
		return kube.Owner{}, fmt.Errorf("get replicaset %s/%s: %w", ns, name, err)
	}
	for _, r := range rs.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return kube.Owner{Kind: r.Kind, Name: r.Name}, nil
		}
	}
	// A ReplicaSet made by hand owns its pods itself.
	return kube.Owner{Kind: "ReplicaSet", Name: name}, nil
}

func inferDeployment(rs string) kube.Owner {
	if i := strings.LastIndexByte(rs, '-'); i > 0 {
		return kube.Owner{Kind: "Deployment", Name: rs[:i], Inferred: true}
	}
	return kube.Owner{Kind: "ReplicaSet", Name: rs}
}
