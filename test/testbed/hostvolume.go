package testbed

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/certdrift/certdrift/test/atomicdir"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// hostSecretVolume keeps a directory the way the kubelet keeps a Secret volume, for a process
// the testbed runs on the host rather than in a pod (the Envoy Gateway control plane): the
// Secret's items written in the atomic-writer layout (..data swap) with the same payload rules
// as the node agent's volumes (secretVolumeFiles), re-projected every sync period until stopped.
// A process that has the directory bind-mounted (at /certs) therefore sees a Secret update the
// way it would in a cluster, after up to one sync period.
//
// Hold and Release stand in for a kubelet that syncs later than another node's: the window a
// rotation has in a cluster while one pod sees the new Secret and another does not yet (the
// kubelet's sync period plus its cache TTL, about a minute by default).
type hostSecretVolume struct {
	client              kubernetes.Interface
	namespace, name, to string
	items               []corev1.KeyToPath
	every               time.Duration
	log                 *slog.Logger

	syncMu   sync.Mutex // atomicdir.Write is not safe for concurrent use on one directory
	mu       sync.Mutex
	held     bool
	lastErr  error
	synced   time.Time
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// startHostSecretVolume projects the Secret once (an error here fails the start, as a missing
// Secret keeps a pod in ContainerCreating) and then every period.
func startHostSecretVolume(ctx context.Context, client kubernetes.Interface, namespace, name, dir string, items []corev1.KeyToPath, every time.Duration, log *slog.Logger) (*hostSecretVolume, error) {
	v := &hostSecretVolume{client: client, namespace: namespace, name: name, to: dir, items: items, every: every, log: log, done: make(chan struct{})}
	if err := v.sync(ctx); err != nil {
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	v.cancel = cancel
	go v.run(bg)
	return v, nil
}

func (v *hostSecretVolume) sync(ctx context.Context) error {
	v.syncMu.Lock()
	defer v.syncMu.Unlock()
	payload, err := secretVolumeFiles(ctx, v.client, v.namespace, v.name, v.items, false)
	if err == nil {
		err = atomicdir.Write(v.to, payload)
	}
	if err != nil {
		err = fmt.Errorf("project Secret %s/%s into %s: %w", v.namespace, v.name, v.to, err)
	}
	v.mu.Lock()
	v.lastErr = err
	if err == nil {
		v.synced = time.Now()
	}
	v.mu.Unlock()
	return err
}

func (v *hostSecretVolume) run(ctx context.Context) {
	defer close(v.done)
	t := time.NewTicker(v.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v.mu.Lock()
		held := v.held
		v.mu.Unlock()
		if held {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, httpTimeout)
		if err := v.sync(sctx); err != nil && ctx.Err() == nil {
			// Like the kubelet: the volume keeps its last good content and the next sync retries.
			v.log.Warn("host volume sync failed", "secret", v.namespace+"/"+v.name, "err", err)
		}
		cancel()
	}
}

// Hold stops re-projection until Release: the directory keeps what it holds now.
func (v *hostSecretVolume) Hold() {
	v.mu.Lock()
	v.held = true
	v.mu.Unlock()
}

// Release resumes re-projection and projects the Secret's current content at once.
func (v *hostSecretVolume) Release(ctx context.Context) error {
	v.mu.Lock()
	v.held = false
	v.mu.Unlock()
	return v.sync(ctx)
}

func (v *hostSecretVolume) Stop() {
	v.stopOnce.Do(func() {
		if v.cancel != nil {
			v.cancel()
			<-v.done
		}
	})
}
