package remediate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/certdrift/certdrift/kubeapi"
)

// What became of the last action on a workload is remembered beside its cooldown, in
// annotations of the workload's reload Lease (one per workload, all in certdrift's own
// namespace: see LeaseName), so that every run of `audit --reload` and every
// replica of `serve --remediate` (a new leader too) sees it. An action that disrupted the
// workload and was not seen to work — its replacement never Ready, or Ready but not serving the
// desired certificate, or its process stopped before it knew — blocks every further action on
// that workload until a person clears the record or the workload is healthy again: without
// this, a replacement that can never start turns one eviction per cooldown into an outage
// (issue 14).

// Annotations on the reload Lease. Removing AnnOutcome (or deleting the Lease) clears a block.
const (
	AnnOutcome     = "certdrift.dev/last-outcome"      // StateActing, StateDone, StateFailed, StateRecovered
	AnnReason      = "certdrift.dev/last-reason"       // a Reason* code when failed
	AnnOutcomeTime = "certdrift.dev/last-outcome-time" // RFC 3339, when the outcome was recorded
	AnnStrategy    = "certdrift.dev/last-strategy"
	AnnTarget      = "certdrift.dev/last-target" // the pod ("namespace/name") or the workload acted on
	AnnDetail      = "certdrift.dev/last-detail" // one line for people, never key material
)

// States of a workload's last action.
const (
	// StateActing: the workload was disrupted (pod evicted, rollout restarted, Envoy quit) and
	// the replacement is not verified yet. Found by a later run after the action's deadline, it
	// means the acting process stopped before it knew: the replacement is checked then.
	StateActing = "acting"
	// StateDone: the replacement was Ready and served the desired certificate.
	StateDone = "done"
	// StateFailed: the replacement was not verified; further actions are blocked.
	StateFailed = "failed"
	// StateRecovered: a failed workload was seen healthy again (all desired replicas Ready and
	// serving the desired certificate), which lifts the block.
	StateRecovered = "recovered"
)

// Reasons an action ended failed: a closed set, for the Lease, Events, metrics and scripts.
const (
	// ReasonReplacementNotReady: the replacement pod (or the rollout, or the restarted
	// container) did not become Ready before the action's deadline.
	ReasonReplacementNotReady = "replacement_not_ready"
	// ReasonPostCheckFailed: the replacement was Ready but did not serve the desired certificate.
	ReasonPostCheckFailed = "post_check_failed"
	// ReasonUnverified: the process that acted stopped (or lost leadership) before it verified
	// the replacement, and a later run did not find it Ready and serving the desired certificate.
	ReasonUnverified = "unverified"
)

// Reasons lists the failure reasons, for metrics that declare their series up front.
var Reasons = []string{ReasonReplacementNotReady, ReasonPostCheckFailed, ReasonUnverified}

// Record is a workload's last action as its reload Lease remembers it.
type Record struct {
	// At is the last action's start (the Lease's renewTime): the cooldown counts from it.
	At time.Time
	// State is "" when nothing but the cooldown is recorded (older certdrift, or a person
	// removed the outcome to clear a block).
	State    string
	Reason   string
	Since    time.Time // when State was recorded
	Strategy Strategy
	Target   string
	Detail   string
}

// Blocking reports whether the record forbids further actions on its workload.
func (r Record) Blocking() bool { return r.State == StateFailed }

func recordFromLease(l *coordv1.Lease) Record {
	var r Record
	if l.Spec.RenewTime != nil {
		r.At = l.Spec.RenewTime.Time
	}
	a := l.Annotations
	r.State, r.Reason, r.Target, r.Detail = a[AnnOutcome], a[AnnReason], a[AnnTarget], a[AnnDetail]
	r.Strategy = Strategy(a[AnnStrategy])
	if t, err := time.Parse(time.RFC3339Nano, a[AnnOutcomeTime]); err == nil {
		r.Since = t
	}
	switch r.State {
	case "", StateActing, StateDone, StateFailed, StateRecovered:
	default:
		// A value nobody wrote on purpose: treat as failed rather than let it act.
		r.State, r.Reason = StateFailed, ReasonUnverified
		r.Detail = fmt.Sprintf("unknown %s value %q", AnnOutcome, a[AnnOutcome])
	}
	return r
}

// All of certdrift's Leases live in its own namespace (the election Lease and one reload
// record per workload), so that RBAC grants Leases there only: with records in each workload's
// namespace, repair needed Lease writes cluster-wide, including kube-system's leader-election
// Leases and kube-node-lease's node heartbeats (issue 16). Records an earlier version left in
// workload namespaces are not read.

// Labels and annotations naming the workload a record Lease is about, so that
// `kubectl get lease -n <certdrift's namespace> -L certdrift.dev/workload-namespace,...` reads
// without decoding names.
const (
	LabelComponent         = "app.kubernetes.io/component" // ComponentReloadRecord
	ComponentReloadRecord  = "reload-record"
	LabelWorkloadNamespace = "certdrift.dev/workload-namespace"
	LabelWorkloadKind      = "certdrift.dev/workload-kind"
	// A label is left out when its value could not be one (a name longer than 63);
	// AnnWorkload always holds the whole key.
	LabelWorkloadName = "certdrift.dev/workload-name"
	AnnWorkload       = "certdrift.dev/workload" // "namespace/Kind/name"
)

// ErrNoLeaseNamespace: reload records cannot be kept without certdrift's namespace.
var ErrNoLeaseNamespace = errors.New("no namespace for certdrift's reload record Leases (--reload-lease-namespace or $POD_NAMESPACE)")

// maxLeaseName is a Lease name's limit (a DNS subdomain).
const maxLeaseName = 253

// LeaseName is the record Lease of a workload:
// "certdrift-reload.<namespace>.<kind>.<name>". Namespaces and kinds hold no dot, so the name
// is unique per workload; a name longer than a Lease name may be is cut and given a hash of
// the whole key, which keeps it unique and a valid DNS subdomain.
func LeaseName(w Workload) string {
	n := "certdrift-reload." + w.Namespace + "." + strings.ToLower(w.Kind) + "." + w.Name
	if len(n) <= maxLeaseName {
		return n
	}
	sum := sha256.Sum256([]byte(w.String()))
	suffix := "-" + hex.EncodeToString(sum[:8])
	// Each dot-separated part must end in a letter or digit: trim what the cut left dangling.
	return strings.TrimRight(n[:maxLeaseName-len(suffix)], ".-") + suffix
}

func recordLabels(w Workload) map[string]string {
	l := map[string]string{"app.kubernetes.io/managed-by": "certdrift", LabelComponent: ComponentReloadRecord}
	for k, v := range map[string]string{LabelWorkloadNamespace: w.Namespace, LabelWorkloadKind: w.Kind, LabelWorkloadName: w.Name} {
		if len(validation.IsValidLabelValue(v)) == 0 {
			l[k] = v
		}
	}
	return l
}

// ReadRecord reads the workload's reload record from its Lease in leaseNS (certdrift's
// namespace); ok is false when there is none.
func ReadRecord(ctx context.Context, c *kubeapi.Client, leaseNS string, w Workload) (Record, bool, error) {
	if leaseNS == "" {
		return Record{}, false, ErrNoLeaseNamespace
	}
	name := LeaseName(w)
	l, err := c.CoordinationV1().Leases(leaseNS).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("read reload lease %s/%s of %s: %w", leaseNS, name, w, err)
	}
	return recordFromLease(l), true, nil
}

// writeRecord stores r in the workload's reload Lease in leaseNS, creating it when missing. The
// cooldown (renewTime) moves only when r.At is set.
func writeRecord(ctx context.Context, c *kubeapi.Client, leaseNS string, w Workload, r Record) error {
	if leaseNS == "" {
		return ErrNoLeaseNamespace
	}
	name := LeaseName(w)
	leases := c.CoordinationV1().Leases(leaseNS)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	create := apierrors.IsNotFound(err)
	switch {
	case create:
		l = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: leaseNS}}
	case err != nil:
		return fmt.Errorf("record reload of %s in lease %s/%s: %w", w, leaseNS, name, err)
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	for k, v := range recordLabels(w) {
		l.Labels[k] = v
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	a := l.Annotations
	a[AnnWorkload] = w.String()
	a[AnnOutcome], a[AnnOutcomeTime] = r.State, r.Since.UTC().Format(time.RFC3339Nano)
	set := func(k, v string) {
		if v == "" {
			delete(a, k)
		} else {
			a[k] = v
		}
	}
	set(AnnReason, r.Reason)
	set(AnnStrategy, string(r.Strategy))
	set(AnnTarget, r.Target)
	if len(r.Detail) > 1024 {
		r.Detail = r.Detail[:1024]
	}
	set(AnnDetail, r.Detail)
	if !r.At.IsZero() {
		holder := "certdrift"
		rt := metav1.NewMicroTime(r.At)
		l.Spec.RenewTime, l.Spec.HolderIdentity = &rt, &holder
		if l.Spec.AcquireTime == nil {
			l.Spec.AcquireTime = &rt
		}
	}
	if create {
		_, err = leases.Create(ctx, l, metav1.CreateOptions{FieldManager: "certdrift"})
	} else {
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: "certdrift"})
	}
	if err != nil {
		return fmt.Errorf("record reload of %s in lease %s/%s: %w", w, leaseNS, name, err)
	}
	return nil
}

// ClearHint tells a person how to lift the block of a workload by hand.
func ClearHint(leaseNS string, w Workload) string {
	return fmt.Sprintf("kubectl -n %s annotate lease %s %s-", leaseNS, LeaseName(w), AnnOutcome)
}

// CheckLeaseNamespace makes sure a record Lease can be created in leaseNS, by a server-side
// dry run, before anything is disrupted: an action whose cooldown and outcome cannot be
// recorded must not start. A missing namespace or a missing permission is said in words.
func CheckLeaseNamespace(ctx context.Context, c *kubeapi.Client, leaseNS string) error {
	if leaseNS == "" {
		return ErrNoLeaseNamespace
	}
	l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "certdrift-reload-check", Namespace: leaseNS}}
	_, err := c.CoordinationV1().Leases(leaseNS).Create(ctx, l, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "certdrift"})
	switch {
	case err == nil || apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("namespace %q for certdrift's reload record Leases does not exist: create it, or name certdrift's namespace with --reload-lease-namespace: %w", leaseNS, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("may not create Leases in namespace %q, where certdrift keeps its reload records: grant get, create and update on leases (coordination.k8s.io) there (the repair profile does, in certdrift's own namespace): %w", leaseNS, err)
	}
	return fmt.Errorf("check that reload record Leases can be written in namespace %q: %w", leaseNS, err)
}
