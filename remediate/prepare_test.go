package remediate

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
)

// TestPrepareKube: on a real API server, planning takes each stale pod's owner from the audit's
// pod context and reads only the pod (for its strategy annotation) and the workload's record
// Lease. The pods carry no owner reference at all (an owner that does not exist would have the
// test cluster's garbage collector delete them mid-test): resolving the owner from the pod, as
// the code that used to live here did, would find a bare pod and plan nothing, while the pod
// context names Deployment/web. A pod gone since the audit is left out, and a converged pod is
// not read at all.
func TestPrepareKube(t *testing.T) {
	tb := controlPlane(t)
	ns, leaseNS := testNamespace(t, tb), testNamespace(t, tb)
	c := newClient(t, tb, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{"web-1", "web-2"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "example.invalid/nothing"}}}}
		if name == "web-2" {
			p.Annotations = map[string]string{StrategyAnnotation: "admin-quit"}
		}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	web := Workload{Namespace: ns, Kind: "Deployment", Name: "web"}
	acted := metav1.NewMicroTime(time.Now().Add(-time.Minute).Truncate(time.Microsecond))
	if _, err := c.CoordinationV1().Leases(leaseNS).Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(web)},
		Spec: coordv1.LeaseSpec{RenewTime: &acted}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	view := func(name string) audit.EnvoyView {
		return audit.EnvoyView{Config: config.Envoy{Name: ns + "/" + name},
			Pod: &audit.PodContext{Namespace: ns, Pod: name, Workload: "Deployment/web"}}
	}
	in := audit.Inputs{Envoys: []audit.EnvoyView{view("web-1"), view("web-2"), view("web-gone"), view("web-converged")}}
	report := audit.Report{Findings: []audit.Finding{
		{Code: audit.StaleServed, Subject: audit.Subject{Envoy: ns + "/web-1"}},
		{Code: audit.StaleLoaded, Subject: audit.Subject{Envoy: ns + "/web-2"}},
		{Code: audit.StaleServed, Subject: audit.Subject{Envoy: ns + "/web-gone"}},
		{Code: audit.Expiring, Subject: audit.Subject{Envoy: ns + "/web-converged"}},
	}}
	var opt Options
	got, err := PrepareKube(ctx, c, leaseNS, report, in, &opt)
	if err != nil {
		t.Fatalf("PrepareKube: %v", err)
	}
	var names []string
	for _, ev := range got.Envoys {
		names = append(names, ev.Config.Name)
	}
	if diff := cmp.Diff([]string{ns + "/web-1", ns + "/web-2"}, names); diff != "" {
		t.Errorf("envoys to plan (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{ns + "/web-2": "admin-quit"}, opt.Annotated); diff != "" {
		t.Errorf("strategy annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]time.Time{web.String(): acted.Time}, opt.LastAction, cmp.Comparer(time.Time.Equal)); diff != "" {
		t.Errorf("last actions (-want +got):\n%s", diff)
	}
	opt.Kubernetes, opt.Budget, opt.Now = true, 5, time.Now()
	for _, a := range Plan(report, got, opt) {
		if a.Target.Envoy == ns+"/web-gone" {
			if a.Skip == "" {
				t.Errorf("the pod gone since the audit is planned: %+v", a)
			}
			continue
		}
		if a.Target.Workload != web {
			t.Errorf("%s planned on workload %v, want %v from the pod context", a.Target.Envoy, a.Target.Workload, web)
		}
	}
}
