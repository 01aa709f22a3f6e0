package remediate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certdrift/certdrift/kubeapi"
)

// RefusedError is an eviction the API server kept refusing (HTTP 429: a PodDisruptionBudget
// allows no disruption now) until the deadline. Nothing was forced.
type RefusedError struct {
	Pod     string
	Message string // the API server's reason, e.g. the PDB it would violate
	Tries   int
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("eviction of %s refused %d times, last: %s", e.Pod, e.Tries, e.Message)
}

// defaultRetryAfter is the wait after a 429 that names none.
const defaultRetryAfter = 5 * time.Second

// EvictOptions tune EvictPod; Sleep and Now are replaced in tests.
type EvictOptions struct {
	// UID, when set, is a precondition: only this pod, not a namesake that replaced it.
	UID types.UID
	// RefusalWait is how long refusals are retried (after each Retry-After) before giving up.
	RefusalWait time.Duration
	Sleep       func(context.Context, time.Duration) error
	Now         func() time.Time
}

// EvictPod posts one policy/v1 Eviction for namespace/name and retries a refusal itself,
// honouring Retry-After, until refusalWait has passed; then it returns a *RefusedError.
//
// The request is made with MaxRetries(0): client-go otherwise retries HTTP 429 silently (up to
// ten times, sleeping Retry-After each), so a PDB refusal would block until the context ends and
// never be reported as what it is. The PDB is never bypassed: there is no delete fallback.
func EvictPod(ctx context.Context, c *kubeapi.Client, namespace, name string, opt EvictOptions) (tries int, err error) {
	sleep, now, uid := opt.Sleep, opt.Now, opt.UID
	if sleep == nil {
		sleep = sleepCtx
	}
	if now == nil {
		now = time.Now
	}
	ev := policyv1.Eviction{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}
	if uid != "" {
		// A StatefulSet reuses names.
		ev.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return 0, fmt.Errorf("encode eviction of %s/%s: %w", namespace, name, err)
	}
	deadline := now().Add(opt.RefusalWait)
	for {
		tries++
		err := c.CoreV1().RESTClient().Post().
			Namespace(namespace).Resource("pods").Name(name).SubResource("eviction").
			SetHeader("Content-Type", "application/json").
			MaxRetries(0).
			Body(body).Do(ctx).Error()
		if err == nil {
			return tries, nil
		}
		if !apierrors.IsTooManyRequests(err) {
			return tries, fmt.Errorf("evict pod %s/%s: %w", namespace, name, err)
		}
		wait := defaultRetryAfter
		if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		if now().Add(wait).After(deadline) {
			var st apierrors.APIStatus
			msg := err.Error()
			if errors.As(err, &st) {
				msg = st.Status().Message
			}
			return tries, &RefusedError{Pod: namespace + "/" + name, Message: msg, Tries: tries}
		}
		if err := sleep(ctx, wait); err != nil {
			return tries, fmt.Errorf("evict pod %s/%s: waiting out a refusal: %w", namespace, name, err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
