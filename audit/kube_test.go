package audit

import (
	"crypto/x509"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/certs"
)

// kubeRef is the Secret or ConfigMap a Kubernetes-mode source name names.
func kubeRef(name string) ref.Source {
	src, ok := ref.ParseKube(name)
	if !ok {
		panic("not a Kubernetes source name: " + name)
	}
	return src
}

// kubeDesired is a Secret as the Kubernetes inventory reports it: named namespace/name, no files.
func kubeDesired(name string, leaf *certs.Leaf, changedAt time.Time, ca ...*x509.Certificate) desired.Observation {
	it := desired.Item{Chain: leaf.Chain(), CA: ca}
	return desired.Observation{Ref: kubeRef(name), ChangedAt: changedAt, Items: []desired.Item{it}}
}

// pod is an Envoy pod of workload wl with bindings to sources and the given handshakes.
func pod(ns, name, wl string, started time.Time, admin *envoystate.Snapshot, bindings []config.Binding, served ...tlsprobe.Result) EnvoyView {
	ev := EnvoyView{Config: config.Envoy{Name: ns + "/" + name, Bindings: bindings}, Admin: admin, Served: served,
		Pod: &PodContext{Namespace: ns, Pod: name, Workload: wl, StartedAt: started}}
	if admin != nil {
		ev.Config.Admin = "http://" + name + ":9901"
	}
	return ev
}

func TestKubernetesChecks(t *testing.T) {
	f := newFixture(t)
	rotated := now.Add(-10 * time.Minute) // beyond the 2m default grace
	justNow := now.Add(-20 * time.Second) // inside it
	started := now.Add(-time.Hour)
	web := []config.Binding{{Source: "shop/web", File: "/certs/tls.crt"}}
	policy := config.DefaultPolicy

	cases := map[string]struct {
		reason string
		in     Inputs
		want   got
	}{
		"ReplicasAgree": {
			reason: "both replicas serve the desired leaf",
			in: Inputs{Desired: []desired.Observation{kubeDesired("shop/web", f.cur, rotated)}, Envoys: []EnvoyView{
				pod("shop", "web-a", "Deployment/web", started, nil, web, served("10.0.0.1:8443", "www.example.com", f.cur.Cert)),
				pod("shop", "web-b", "Deployment/web", started, nil, web, served("10.0.0.2:8443", "www.example.com", f.cur.Cert)),
			}},
			want: got{States: []string{"shop/web=converged", "shop/web=converged"}},
		},
		"OneReplicaBehind": {
			reason: "one replica serves the old leaf past the grace period: stale, and divergent from its sibling",
			in: Inputs{Desired: []desired.Observation{kubeDesired("shop/web", f.cur, rotated)}, Envoys: []EnvoyView{
				pod("shop", "web-a", "Deployment/web", started, nil, web, served("10.0.0.1:8443", "www.example.com", f.cur.Cert)),
				pod("shop", "web-b", "Deployment/web", started, nil, web, served("10.0.0.2:8443", "www.example.com", f.old.Cert)),
			}},
			want: got{Codes: []string{"REPLICA_DIVERGENCE warning", "STALE_SERVED warning"}, States: []string{"shop/web=converged", "shop/web=stale"}},
		},
		"ReplicasDivergeWithinGrace": {
			reason: "a rotation 20s ago is still rolling through the replicas: no finding",
			in: Inputs{Desired: []desired.Observation{kubeDesired("shop/web", f.cur, justNow)}, Envoys: []EnvoyView{
				pod("shop", "web-a", "Deployment/web", started, nil, web, served("10.0.0.1:8443", "www.example.com", f.cur.Cert)),
				pod("shop", "web-b", "Deployment/web", started, nil, web, served("10.0.0.2:8443", "www.example.com", f.old.Cert)),
			}},
			want: got{States: []string{"shop/web=converged", "shop/web=converging"}},
		},
		"DifferentWorkloadsMayDiffer": {
			reason: "two workloads serving different leaves on the same port are not replicas",
			in: Inputs{Envoys: []EnvoyView{
				pod("shop", "web-a", "Deployment/web", started, nil, nil, served("10.0.0.1:8443", "", f.cur.Cert)),
				pod("shop", "api-a", "Deployment/api", started, nil, nil, served("10.0.0.2:8443", "", f.other.Cert)),
			}},
			// No desired source holds either leaf: each is a gap (UNBOUND), never a divergence.
			want: got{Codes: []string{"UNBOUND warning", "UNBOUND warning"}},
		},
		"NoHotReloadStartedBeforeChange": {
			reason: "a rate limit that never reloads started before its Secret changed: STALE_PROCESS without any admin",
			in: Inputs{Desired: []desired.Observation{kubeDesired("eg/rl", f.cur, rotated)}, Envoys: []EnvoyView{
				noHotReload(pod("eg", "rl-a", "Deployment/rl", started, nil, []config.Binding{{Source: "eg/rl", File: "/certs/tls.crt"}})),
			}},
			want: got{Codes: []string{"STALE_PROCESS warning"}, States: []string{"eg/rl=stale"}},
		},
		"NoHotReloadStartedAfterChange": {
			reason: "the replacement pod started after the change and read the current certificate",
			in: Inputs{Desired: []desired.Observation{kubeDesired("eg/rl", f.cur, rotated)}, Envoys: []EnvoyView{
				noHotReload(pod("eg", "rl-b", "Deployment/rl", rotated.Add(time.Minute), nil, []config.Binding{{Source: "eg/rl", File: "/certs/tls.crt"}})),
			}},
			want: got{States: []string{"eg/rl=converged"}},
		},
		"NoHotReloadWithinGrace": {
			reason: "changed 20s ago: the restart may be on its way",
			in: Inputs{Desired: []desired.Observation{kubeDesired("eg/rl", f.cur, justNow)}, Envoys: []EnvoyView{
				noHotReload(pod("eg", "rl-a", "Deployment/rl", started, nil, []config.Binding{{Source: "eg/rl", File: "/certs/tls.crt"}})),
			}},
			want: got{States: []string{"eg/rl=converging"}},
		},
		"SubPathMount": {
			reason: "a subPath mount is a risk always, and stale once the Secret changed after the start",
			in: Inputs{Desired: []desired.Observation{kubeDesired("shop/web", f.cur, rotated)}, Envoys: []EnvoyView{
				withRisk(pod("shop", "web-a", "Deployment/web", started, nil, []config.Binding{{Source: "shop/web", File: "/etc/tls.crt"}}), "shop/web"),
			}},
			want: got{Codes: []string{"STALE_PROCESS warning", "SUBPATH_MOUNT warning"}, States: []string{"shop/web=stale"}},
		},
		"SubPathMountUnchanged": {
			reason: "before any rotation a subPath mount is only a risk",
			in: Inputs{Desired: []desired.Observation{kubeDesired("shop/web", f.cur, started.Add(-time.Hour))}, Envoys: []EnvoyView{
				withRisk(pod("shop", "web-a", "Deployment/web", started, nil, []config.Binding{{Source: "shop/web", File: "/etc/tls.crt"}}), "shop/web"),
			}},
			want: got{Codes: []string{"SUBPATH_MOUNT warning"}, States: []string{"shop/web=converged"}},
		},
		"InferenceStaysInNamespace": {
			reason: "staging serves the same host name from its own Secret: never judged against production's",
			in: Inputs{Desired: []desired.Observation{kubeDesired("prod/web", f.cur, rotated)}, Envoys: []EnvoyView{
				pod("staging", "web-a", "Deployment/web", started, loadedFile("/certs/tls.crt", f.old.Cert), nil, served("10.0.0.9:8443", "www.example.com", f.old.Cert)),
			}},
			// staging's own Secret is not in the inputs: what it serves is a gap, not a pass.
			want: got{Codes: []string{"UNBOUND warning"}},
		},
		"InferenceWithinNamespace": {
			reason: "the same heuristic still binds a pod to its own namespace's Secret",
			in: Inputs{Desired: []desired.Observation{kubeDesired("prod/web", f.cur, rotated)}, Envoys: []EnvoyView{
				pod("prod", "web-a", "Deployment/web", started, loadedFile("/certs/tls.crt", f.old.Cert), nil, served("10.0.0.9:8443", "www.example.com", f.old.Cert)),
			}},
			want: got{Codes: []string{"STALE_LOADED warning", "STALE_SERVED warning"}, States: []string{"prod/web=stale"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := Run(tc.in, policy, now)
			checkLazyAlike(t, tc.in, policy, now, r)
			if diff := cmp.Diff(tc.want, summarize(r)); diff != "" {
				t.Errorf("%s\n(-want +got):\n%s\nfindings: %+v", tc.reason, diff, r.Findings)
			}
		})
	}
}

func noHotReload(ev EnvoyView) EnvoyView {
	ev.Pod.NoHotReload = true
	return ev
}

func withRisk(ev EnvoyView, source string) EnvoyView {
	ev.Pod.Risks = append(ev.Pod.Risks, MountRisk{Container: "envoy", MountPath: "/etc/tls.crt", SubPath: "tls.crt", Source: source, Reason: "subPath"})
	return ev
}

func TestReplicaDivergenceNamesTheWrongReplica(t *testing.T) {
	f := newFixture(t)
	web := []config.Binding{{Source: "shop/web", File: "/certs/tls.crt"}}
	started := now.Add(-time.Hour)
	in := Inputs{Desired: []desired.Observation{kubeDesired("shop/web", f.cur, now.Add(-time.Hour))}, Envoys: []EnvoyView{
		pod("shop", "web-a", "Deployment/web", started, nil, web, served("10.0.0.1:8443", "www.example.com", f.cur.Cert)),
		pod("shop", "web-b", "Deployment/web", started, nil, web, served("10.0.0.2:8443", "www.example.com", f.old.Cert)),
		pod("shop", "web-c", "Deployment/web", started, nil, web, served("10.0.0.3:8443", "www.example.com", f.old.Cert)),
	}}
	r := Run(in, config.DefaultPolicy, now)
	var div []Finding
	for _, x := range r.Findings {
		if x.Code == ReplicaDivergence {
			div = append(div, x)
		}
	}
	// The desired leaf decides, not the majority: two replicas are behind, one is right.
	var pods []string
	for _, x := range div {
		pods = append(pods, x.Subject.Envoy)
		if x.Subject.Workload != "Deployment/web" || x.Evidence["replicas"] != "3" || x.Evidence["replicas_serving_expected"] != "1" {
			t.Errorf("finding %+v: want workload Deployment/web, 3 replicas, 1 serving the expected leaf", x)
		}
	}
	if diff := cmp.Diff([]string{"shop/web-b", "shop/web-c"}, pods); diff != "" {
		t.Errorf("divergent replicas (-want +got):\n%s", diff)
	}
	for _, b := range r.Bindings {
		if b.Workload != "Deployment/web" {
			t.Errorf("binding %+v lacks the workload", b)
		}
	}
}

// TestLivePairing is the Envoy Gateway CA rotation (#4891): the proxy ("eg/envoy" Secret) and the
// control plane ("eg/envoy-gateway") authenticate each other with leaves of one CA. The desired
// view is consistent after the rotation; the pods are not until both have reloaded.
func TestLivePairing(t *testing.T) {
	caOld := certs.NewCA(t, certs.WithCommonName("ca-old"), certs.WithValidity(now.Add(-48*time.Hour), now.Add(3650*24*time.Hour)))
	caNew := certs.NewCA(t, certs.WithCommonName("ca-new"), certs.WithValidity(now.Add(-48*time.Hour), now.Add(3650*24*time.Hour)))
	valid := certs.WithValidity(now.Add(-24*time.Hour), now.Add(90*24*time.Hour))
	leaf := func(ca *certs.Authority, name string) *certs.Leaf {
		return ca.Leaf(t, certs.WithCommonName(name), certs.WithDNSNames(name+".eg.svc"), certs.WithClientAuth(), certs.WithFreshKey(), valid)
	}
	proxyOld, proxyNew := leaf(caOld, "envoy"), leaf(caNew, "envoy")
	cpOld, cpNew := leaf(caOld, "envoy-gateway"), leaf(caNew, "envoy-gateway")
	started := now.Add(-time.Hour)

	// proxy holds its client leaf and trust in file-based SDS secrets watching /certs.
	proxy := func(l *certs.Leaf, trust ...*x509.Certificate) EnvoyView {
		snap := &envoystate.Snapshot{AdminURL: "http://proxy:19000", Secrets: []envoystate.Secret{
			{Name: "xds_certificate", State: envoystate.SecretActive, HasCertificate: true, WatchedDir: "/certs", Chain: l.Chain()},
			{Name: "xds_trusted_ca", State: envoystate.SecretActive, HasValidation: true, WatchedDir: "/certs", ValidationCA: trust},
		}}
		return pod("eg", "envoy-1", "Deployment/envoy", started, snap, []config.Binding{{Source: "eg/envoy", Secret: "xds_certificate"}})
	}
	cp := func(l *certs.Leaf, trust ...*x509.Certificate) EnvoyView {
		snap := &envoystate.Snapshot{AdminURL: "http://cp:19001", Secrets: []envoystate.Secret{
			{Name: "server_cert", State: envoystate.SecretActive, HasCertificate: true, WatchedDir: "/certs", Chain: l.Chain()},
			{Name: "client_ca", State: envoystate.SecretActive, HasValidation: true, WatchedDir: "/certs", ValidationCA: trust},
		}}
		return pod("eg", "envoy-gateway-1", "Deployment/envoy-gateway", started, snap,
			[]config.Binding{{Source: "eg/envoy-gateway", Secret: "server_cert"}},
			served("10.0.0.5:18000", "", l.Cert))
	}
	desiredAt := func(changed time.Time, bundle ...*x509.Certificate) []desired.Observation {
		return []desired.Observation{kubeDesired("eg/envoy", proxyNew, changed, bundle...), kubeDesired("eg/envoy-gateway", cpNew, changed, bundle...)}
	}
	pairings := []config.Pairing{
		{Name: "xds", Bundle: config.Ref{Source: "eg/envoy"}, Leaf: config.Ref{Source: "eg/envoy-gateway"}},
		{Name: "xds (reverse)", Bundle: config.Ref{Source: "eg/envoy-gateway"}, Leaf: config.Ref{Source: "eg/envoy"}},
	}
	rotated, justNow := now.Add(-10*time.Minute), now.Add(-20*time.Second)
	type gap struct{ Trusting, Presenting string }
	cases := map[string]struct {
		reason   string
		desired  []desired.Observation
		envoys   []EnvoyView
		wantGaps []gap
		wantSev  Severity
	}{
		"BothOld": {
			reason:  "before the rotation reached the pods: both trust and present the old CA",
			desired: desiredAt(rotated, caNew.Cert),
			envoys:  []EnvoyView{proxy(proxyOld, caOld.Cert), cp(cpOld, caOld.Cert)},
		},
		"ProxyAheadWithoutBundle": {
			reason:   "the proxy reloaded [newCA]; the control plane still presents and trusts the old CA: gaps both ways",
			desired:  desiredAt(rotated, caNew.Cert),
			envoys:   []EnvoyView{proxy(proxyNew, caNew.Cert), cp(cpOld, caOld.Cert)},
			wantGaps: []gap{{"eg/envoy-1", "eg/envoy-gateway-1"}, {"eg/envoy-gateway-1", "eg/envoy-1"}},
			wantSev:  Critical,
		},
		"ProxyAheadWithBundle": {
			reason: "with [newCA, oldCA] the proxy accepts the old control plane leaf, but the control plane " +
				"(still [oldCA]) rejects the proxy's new leaf: the bundle fixes one direction only",
			desired:  desiredAt(rotated, caNew.Cert, caOld.Cert),
			envoys:   []EnvoyView{proxy(proxyNew, caNew.Cert, caOld.Cert), cp(cpOld, caOld.Cert)},
			wantGaps: []gap{{"eg/envoy-gateway-1", "eg/envoy-1"}},
			wantSev:  Critical,
		},
		"WindowWithinGrace": {
			reason:   "the same gap 20s after the change is the rotation window: warning",
			desired:  desiredAt(justNow, caNew.Cert),
			envoys:   []EnvoyView{proxy(proxyNew, caNew.Cert), cp(cpOld, caOld.Cert)},
			wantGaps: []gap{{"eg/envoy-1", "eg/envoy-gateway-1"}, {"eg/envoy-gateway-1", "eg/envoy-1"}},
			wantSev:  Warning,
		},
		"Converged": {
			reason:  "both reloaded: no gap",
			desired: desiredAt(rotated, caNew.Cert),
			envoys:  []EnvoyView{proxy(proxyNew, caNew.Cert), cp(cpNew, caNew.Cert)},
		},
	}
	// The proxy's certificate sits in an upstream (cluster) TLS context, which no listener ties
	// to its mount: its binding names only the file, and the loaded certificate with the desired
	// names is what it presents.
	mountOnly := proxy(proxyNew, caNew.Cert)
	mountOnly.Config.Bindings = []config.Binding{{Source: "eg/envoy", File: "/certs/tls.crt"}}
	cases["ProxyBoundByMountOnly"] = struct {
		reason   string
		desired  []desired.Observation
		envoys   []EnvoyView
		wantGaps []gap
		wantSev  Severity
	}{
		reason:   "the same window with the proxy bound by its mount only",
		desired:  desiredAt(rotated, caNew.Cert),
		envoys:   []EnvoyView{mountOnly, cp(cpOld, caOld.Cert)},
		wantGaps: []gap{{"eg/envoy-1", "eg/envoy-gateway-1"}, {"eg/envoy-gateway-1", "eg/envoy-1"}},
		wantSev:  Critical,
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := Inputs{Config: &config.Config{Pairings: pairings}, Desired: tc.desired, Envoys: tc.envoys}
			r := Run(in, config.DefaultPolicy, now)
			checkLazyAlike(t, in, config.DefaultPolicy, now, r)
			var gaps []gap
			for _, x := range r.Findings {
				if x.Code != CABundleGap {
					continue
				}
				gaps = append(gaps, gap{x.Subject.Envoy, x.Evidence["leaf_presented_by"]})
				if x.Severity != tc.wantSev {
					t.Errorf("%s: severity %v, want %v", x.Message, x.Severity, tc.wantSev)
				}
			}
			slices.SortFunc(gaps, func(a, b gap) int { return cmpStrings(a.Trusting+a.Presenting, b.Trusting+b.Presenting) })
			if diff := cmp.Diff(tc.wantGaps, gaps); diff != "" {
				t.Errorf("%s\nCA_BUNDLE_GAP (trusting pod, presenting pod) (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestMutualPairingExpands(t *testing.T) {
	c, err := config.ParseCluster([]byte("pairings:\n- name: xds\n  bundle: {source: eg/envoy}\n  leaf: {source: eg/envoy-gateway}\n  mutual: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []config.Pairing{
		{Name: "xds", Bundle: config.Ref{Source: "eg/envoy"}, Leaf: config.Ref{Source: "eg/envoy-gateway"}},
		{Name: "xds (reverse)", Bundle: config.Ref{Source: "eg/envoy-gateway"}, Leaf: config.Ref{Source: "eg/envoy"}},
	}
	if diff := cmp.Diff(want, c.Pairings); diff != "" {
		t.Errorf("pairings (-want +got):\n%s", diff)
	}
}
