package kube

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/kubeapi"
)

// ownerCache resolves ReplicaSets to the Deployments that own them. A ReplicaSet's controller
// never changes, so each is read once; entries no live target refers to are dropped at every
// resolve, which bounds the cache by the number of Envoy ReplicaSets.
type ownerCache struct {
	client *kubeapi.Client
	mu     sync.Mutex
	byRS   map[string]Owner // "ns/replicaset" → owner
}

func newOwnerCache(c *kubeapi.Client) *ownerCache {
	return &ownerCache{client: c, byRS: map[string]Owner{}}
}

// ownerTimeout bounds one ReplicaSet read.
const ownerTimeout = 5 * time.Second

// resolve replaces ReplicaSet owners in targets by their controller (usually a Deployment). A
// ReplicaSet that cannot be read is named as the Deployment its name implies
// ("<deployment>-<pod-template-hash>"), marked Inferred, and the error is returned; a failed
// read is retried at the next resolve.
func (c *ownerCache) resolve(ctx context.Context, targets []EnvoyTarget, now func() time.Time) []SourceError {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []SourceError
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
			errs = append(errs, SourceError{Source: "replicasets " + key, At: now(), Err: err})
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

func (c *ownerCache) read(ctx context.Context, ns, name string) (Owner, error) {
	ctx, cancel := context.WithTimeout(ctx, ownerTimeout)
	defer cancel()
	rs, err := c.client.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return Owner{}, &AccessError{Verb: "get", Resource: "replicasets", Namespace: ns, Err: err}
		}
		return Owner{}, fmt.Errorf("get replicaset %s/%s: %w", ns, name, err)
	}
	for _, r := range rs.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return Owner{Kind: r.Kind, Name: r.Name}, nil
		}
	}
	// A ReplicaSet made by hand owns its pods itself.
	return Owner{Kind: "ReplicaSet", Name: name}, nil
}

func inferDeployment(rs string) Owner {
	if i := strings.LastIndexByte(rs, '-'); i > 0 {
		return Owner{Kind: "Deployment", Name: rs[:i], Inferred: true}
	}
	return Owner{Kind: "ReplicaSet", Name: rs}
}
