package discovery

import (
	"strconv"
	"strings"
	"testing"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMatchPreset(t *testing.T) {
	all := map[kube.Preset]bool{}
	for _, p := range kube.AllPresets {
		all[p] = true
	}
	pod := func(labels, annotations map[string]string, containers ...corev1.Container) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}, Spec: corev1.PodSpec{Containers: containers}}
	}
	c := func(name, image string) corev1.Container { return corev1.Container{Name: name, Image: image} }
	type want struct {
		Preset    kube.Preset
		Container string
		OK        bool
	}
	cases := map[string]struct {
		reason  string
		pod     *corev1.Pod
		enabled map[kube.Preset]bool
		want    want
	}{
		"IstioSidecar": {
			reason: "an injected istio-proxy makes an app pod an Istio Envoy",
			pod:    pod(nil, nil, c("app", "nginx"), c("istio-proxy", "docker.io/istio/proxyv2:1.27.0")),
			want:   want{kube.PresetIstio, "istio-proxy", true},
		},
		"IstioNativeSidecar": {
			reason: "istio-proxy as an init container with restartPolicy Always (native sidecar)",
			pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c("app", "nginx")},
				InitContainers: []corev1.Container{{Name: "istio-proxy", Image: "istio/proxyv2", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways)}}}},
			want: want{kube.PresetIstio, "istio-proxy", true},
		},
		"IstioInitContainerThatEnds": {
			reason: "istio-init is an ordinary init container, not an Envoy",
			pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c("app", "nginx")},
				InitContainers: []corev1.Container{c("istio-proxy", "istio/proxyv2")}}},
			want: want{},
		},
		"IstioGatewayLabel": {
			reason: "istio=ingressgateway with a differently named container",
			pod:    pod(map[string]string{"istio": "ingressgateway"}, nil, c("proxy", "istio/proxyv2:1.20")),
			want:   want{kube.PresetIstio, "proxy", true},
		},
		"EnvoyGateway": {
			reason: "Envoy Gateway labels win over the Envoy image",
			pod:    pod(map[string]string{"app.kubernetes.io/managed-by": "envoy-gateway"}, nil, c("envoy", "envoyproxy/envoy:distroless-v1.35.0"), c("shutdown-manager", "envoyproxy/gateway:v1.5.0")),
			want:   want{kube.PresetEnvoyGateway, "envoy", true},
		},
		"EnvoyGatewayOwningLabel": {
			pod:  pod(map[string]string{"gateway.envoyproxy.io/owning-gateway-name": "eg"}, nil, c("envoy", "envoyproxy/envoy")),
			want: want{kube.PresetEnvoyGateway, "envoy", true},
		},
		"PlainEnvoyByImage": {
			pod:  pod(nil, nil, c("sidecar", "busybox"), c("proxy", "registry.local/mirror/envoy@sha256:abc")),
			want: want{kube.PresetEnvoy, "proxy", true},
		},
		"EnvoyGatewayControllerIsNotAnEnvoy": {
			reason: "envoyproxy/gateway and envoyproxy/ratelimit are not proxies",
			pod:    pod(nil, nil, c("gateway", "envoyproxy/gateway:v1.5.0"), c("ratelimit", "envoyproxy/ratelimit:master")),
			want:   want{},
		},
		"AnnotatedOnly": {
			pod:  pod(nil, map[string]string{kube.AnnotationAdminPort: "9000"}, c("proxy", "example/edge:1")),
			want: want{kube.PresetAnnotated, "proxy", true},
		},
		"ForcedNone": {
			pod:  pod(nil, map[string]string{kube.AnnotationPreset: "none"}, c("envoy", "envoyproxy/envoy")),
			want: want{},
		},
		"ForcedPreset": {
			pod:  pod(nil, map[string]string{kube.AnnotationPreset: "istio"}, c("edge", "example/edge:1")),
			want: want{kube.PresetIstio, "edge", true},
		},
		"NoReloadComponent": {
			reason:  "a non-Envoy pod declaring hot-reload false (Envoy Gateway's rate limit) is a target without admin, whatever presets are enabled",
			pod:     pod(nil, map[string]string{kube.AnnotationHotReload: "false"}, c("ratelimit", "envoyproxy/ratelimit:master")),
			enabled: map[kube.Preset]bool{kube.PresetIstio: true},
			want:    want{kube.PresetNoReload, "ratelimit", true},
		},
		"EnvoyGatewayRateLimit": {
			reason: "the rate limit Envoy Gateway deploys carries its labels but runs no Envoy: a component without admin that never reloads",
			pod: pod(map[string]string{"app.kubernetes.io/managed-by": "envoy-gateway", "app.kubernetes.io/component": "ratelimit", "app.kubernetes.io/name": "envoy-ratelimit"},
				nil, c("envoy-ratelimit", "docker.io/envoyproxy/ratelimit:8fe6ea42")),
			want: want{kube.PresetNoReload, "envoy-ratelimit", true},
		},
		"EnvoyGatewayRateLimitPresetDisabled": {
			reason: "without the Envoy Gateway preset its rate limit is recognised only by the annotation",
			pod: pod(map[string]string{"app.kubernetes.io/managed-by": "envoy-gateway", "app.kubernetes.io/component": "ratelimit"},
				nil, c("envoy-ratelimit", "docker.io/envoyproxy/ratelimit:8fe6ea42")),
			enabled: map[kube.Preset]bool{kube.PresetEnvoy: true},
			want:    want{},
		},
		"EnvoyGatewayComponentRunningEnvoy": {
			reason: "a pod labelled as a rate limit that runs an Envoy is audited as Envoy Gateway's Envoy",
			pod: pod(map[string]string{"app.kubernetes.io/managed-by": "envoy-gateway", "app.kubernetes.io/component": "ratelimit"},
				nil, c("envoy", "envoyproxy/envoy:v1.36")),
			want: want{kube.PresetEnvoyGateway, "envoy", true},
		},
		"HotReloadTrueIsNotATarget": {
			reason: "hot-reload true on a non-Envoy pod says nothing to audit",
			pod:    pod(nil, map[string]string{kube.AnnotationHotReload: "true"}, c("ratelimit", "envoyproxy/ratelimit:master")),
			want:   want{},
		},
		"NoReloadEnvoyKeepsItsPreset": {
			reason: "an Envoy declared not to reload keeps its preset (and admin)",
			pod:    pod(nil, map[string]string{kube.AnnotationHotReload: "false"}, c("envoy", "envoyproxy/envoy:v1.36")),
			want:   want{kube.PresetEnvoy, "envoy", true},
		},
		"PresetDisabled": {
			pod:     pod(map[string]string{"istio": "ingressgateway"}, nil, c("istio-proxy", "istio/proxyv2")),
			enabled: map[kube.Preset]bool{kube.PresetEnvoy: true},
			want:    want{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			enabled := tc.enabled
			if enabled == nil {
				enabled = all
			}
			var got want
			got.Preset, got.Container, got.OK = matchPreset(tc.pod, enabled)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nmatchPreset (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestTargetAnnotations(t *testing.T) {
	type facts struct {
		AdminPort          int
		AdminLocalhostOnly bool
		ProbePorts         []kube.ProbePort
		DeclaredSecrets    []string
		Errors             []string // substrings, one per AnnotationErrors entry
	}
	cases := map[string]struct {
		annotations map[string]string
		want        facts
	}{
		"PresetDefaults": {
			want: facts{AdminPort: 9901},
		},
		"AllAnnotations": {
			annotations: map[string]string{
				kube.AnnotationAdminPort:  " localhost:15000 ",
				kube.AnnotationProbePorts: "9443/b.example|*.a.example, 8443,",
				kube.AnnotationSecrets:    "web-tls, other/api-tls, web-tls",
			},
			want: facts{AdminPort: 15000, AdminLocalhostOnly: true,
				ProbePorts:      []kube.ProbePort{{Port: 8443}, {Port: 9443, SNIs: []string{"b.example", "*.a.example"}}},
				DeclaredSecrets: []string{"ns/web-tls", "other/api-tls"}},
		},
		"LoopbackAddress": {
			annotations: map[string]string{kube.AnnotationAdminPort: "127.0.0.1:19000"},
			want:        facts{AdminPort: 19000, AdminLocalhostOnly: true},
		},
		"BadAdminPortKeepsDefault": {
			annotations: map[string]string{kube.AnnotationAdminPort: "10.0.0.1:80"},
			want:        facts{AdminPort: 9901, Errors: []string{kube.AnnotationAdminPort + `: "10.0.0.1:80": host must be localhost`}},
		},
		"BadProbeEntriesKeepTheGoodOnes": {
			annotations: map[string]string{kube.AnnotationProbePorts: "8443, 70000, 8443, 9443/not a name"},
			want: facts{AdminPort: 9901, ProbePorts: []kube.ProbePort{{Port: 8443}, {Port: 9443}},
				Errors: []string{`"70000" is not a port number`}},
		},
		"BadSecretRef": {
			annotations: map[string]string{kube.AnnotationSecrets: "ok, a/b/c, Bad_Name"},
			want: facts{AdminPort: 9901, DeclaredSecrets: []string{"ns/ok"},
				Errors: []string{kube.AnnotationSecrets + `: "a/b/c" is not a Secret name`}},
		},
		"HostileLength": {
			annotations: map[string]string{kube.AnnotationSecrets: strings.Repeat("a,", maxAnnotationLen)},
			want:        facts{AdminPort: 9901, Errors: []string{"longer than"}},
		},
		"TooManyPorts": {
			annotations: map[string]string{kube.AnnotationProbePorts: manyPorts(kube.MaxProbePorts + 5)},
			want:        facts{AdminPort: 9901, ProbePorts: portsUpTo(kube.MaxProbePorts), Errors: []string{"more than 64 ports"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Annotations: tc.annotations},
				Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0"}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			tg := targetFor(p, map[kube.Preset]bool{kube.PresetEnvoy: true})
			if tg == nil {
				t.Fatal("no target for an Envoy pod")
			}
			got := facts{AdminPort: tg.AdminPort, AdminLocalhostOnly: tg.AdminLocalhostOnly, ProbePorts: tg.ProbePorts, DeclaredSecrets: tg.DeclaredSecrets}
			if len(tg.AnnotationErrors) != len(tc.want.Errors) {
				t.Errorf("annotation errors %q, want %d matching %q", tg.AnnotationErrors, len(tc.want.Errors), tc.want.Errors)
			}
			for i, e := range tg.AnnotationErrors {
				if i < len(tc.want.Errors) && !strings.Contains(e, tc.want.Errors[i]) {
					t.Errorf("annotation error %q does not contain %q", e, tc.want.Errors[i])
				}
				if len(e) > 2048 {
					t.Errorf("annotation error of %d bytes: hostile input must be shortened", len(e))
				}
			}
			want := tc.want
			want.Errors = nil
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("target (-want +got):\n%s", diff)
			}
		})
	}
}

func manyPorts(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(1000+i) + ",")
	}
	return b.String()
}

func portsUpTo(n int) []kube.ProbePort {
	var out []kube.ProbePort
	for i := 1; i <= n; i++ {
		out = append(out, kube.ProbePort{Port: 1000 + i})
	}
	return out
}

func FuzzParseAnnotations(f *testing.F) {
	for _, s := range []string{"8443", "8443/a.example|b.example, 9443", "localhost:15000", "ns/name, other", ",,,", "/|/|", "65536/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ports, _ := parseProbePorts(s)
		if len(ports) > kube.MaxProbePorts {
			t.Fatalf("%d ports", len(ports))
		}
		for _, p := range ports {
			if p.Port < 1 || p.Port > 65535 || len(p.SNIs) > kube.MaxSNIsPerPort {
				t.Fatalf("port %+v", p)
			}
		}
		refs, _ := parseSecretRefs(s, "ns")
		if len(refs) > maxDeclaredSecrets {
			t.Fatalf("%d refs", len(refs))
		}
		if port, _, err := parseAdminPort(s); err == nil && (port < 1 || port > 65535) {
			t.Fatalf("admin port %d without error", port)
		}
	})
}

// TestNoReloadTarget: a component with no Envoy admin is discovered with AdminPort 0, no
// annotation error, its start time and the Secret it mounts, which is all STALE_PROCESS needs.
func TestNoReloadTarget(t *testing.T) {
	started := metav1.NewTime(metav1.Now().Add(-3600e9).UTC().Truncate(1e9))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "envoy-gateway-system", Name: "envoy-ratelimit-1", UID: "u1",
			Annotations: map[string]string{kube.AnnotationHotReload: "false"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "envoy-ratelimit", Image: "envoyproxy/ratelimit:master",
				VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: "/certs"}}}},
			Volumes: []corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "envoy"}}}},
		},
		Status: corev1.PodStatus{PodIP: "10.0.0.9", StartTime: &started, ContainerStatuses: []corev1.ContainerStatus{{Name: "envoy-ratelimit",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}},
	}
	tg := targetFor(p, map[kube.Preset]bool{kube.PresetEnvoyGateway: true})
	if tg == nil {
		t.Fatal("targetFor(rate limit with hot-reload false) = nil, want a target")
	}
	if tg.AdminPort != 0 || len(tg.AnnotationErrors) != 0 || !tg.NoHotReload || tg.Preset != kube.PresetNoReload {
		t.Errorf("target: admin port %d, errors %v, no hot reload %v, preset %q; want 0, none, true, %q",
			tg.AdminPort, tg.AnnotationErrors, tg.NoHotReload, tg.Preset, kube.PresetNoReload)
	}
	if !tg.StartTime.Equal(started.Time) {
		t.Errorf("start time %v, want %v", tg.StartTime, started.Time)
	}
	want := []ref.Source{{Kind: "Secret", Namespace: "envoy-gateway-system", Name: "envoy"}}
	if diff := cmp.Diff(want, kube.MountedRefs(*tg)); diff != "" {
		t.Errorf("the mounted Secret: -want +got:\n%s", diff)
	}
}

// TestContainerPorts: the Envoy container's TCP ports reach the target, UDP (QUIC) and other
// containers' ports do not; the service account token volume is marked as such.
func TestContainerPorts(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0", Ports: []corev1.ContainerPort{
				{Name: "https", ContainerPort: 8443}, {Name: "quic", ContainerPort: 8443, Protocol: corev1.ProtocolUDP},
				{Name: "admin", ContainerPort: 9901, Protocol: corev1.ProtocolTCP}}},
			{Name: "app", Image: "example/app", Ports: []corev1.ContainerPort{{Name: "https-app", ContainerPort: 9443}}},
		}},
	}
	p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}}}}}},
		{Name: "ca", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "bundle"}}}}}}}}
	tg := targetFor(p, map[kube.Preset]bool{kube.PresetEnvoy: true})
	if tg == nil {
		t.Fatal("targetFor(envoy pod) = nil")
	}
	want := []kube.ContainerPort{{Name: "https", Port: 8443}, {Name: "admin", Port: 9901}}
	if diff := cmp.Diff(want, tg.ContainerPorts); diff != "" {
		t.Errorf("ContainerPorts: -want +got:\n%s", diff)
	}
	wantVols := []kube.PodVolume{{Name: "kube-api-access-x", Token: true, Sources: []kube.VolumeSource{{Kind: "ConfigMap", Name: "kube-root-ca.crt"}}},
		{Name: "ca", Sources: []kube.VolumeSource{{Kind: "ConfigMap", Name: "bundle"}}}}
	if diff := cmp.Diff(wantVols, tg.Volumes); diff != "" {
		t.Errorf("Volumes (the token volume marked): -want +got:\n%s", diff)
	}
}

// TestEnvoyGatewayRateLimitTarget: the rate limit pod as Envoy Gateway v1.9.1 creates it (labels,
// container, /certs mount of envoy-rate-limit; observed on the test cluster, scenario
// eg-ca-rotation) is a target without admin that never reloads, with no annotation; the
// annotation hot-reload "true" still overrides that.
func TestEnvoyGatewayRateLimitTarget(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "envoy-gateway-system", Name: "envoy-ratelimit-5d4f-abc", UID: "u1",
			Labels: map[string]string{"app.kubernetes.io/managed-by": "envoy-gateway", "app.kubernetes.io/component": "ratelimit", "app.kubernetes.io/name": "envoy-ratelimit"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "envoy-ratelimit", Image: "docker.io/envoyproxy/ratelimit:8fe6ea42",
				Ports:        []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8081}},
				VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: "/certs", ReadOnly: true}}}},
			Volumes: []corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "envoy-rate-limit"}}}},
		},
	}
	tg := targetFor(p, map[kube.Preset]bool{kube.PresetEnvoyGateway: true})
	if tg == nil {
		t.Fatal("targetFor(Envoy Gateway rate limit) = nil, want a target")
	}
	if tg.AdminPort != 0 || len(tg.AnnotationErrors) != 0 || !tg.NoHotReload || tg.Preset != kube.PresetNoReload {
		t.Errorf("target: admin port %d, errors %v, no hot reload %v, preset %q; want 0, none, true, %q",
			tg.AdminPort, tg.AnnotationErrors, tg.NoHotReload, tg.Preset, kube.PresetNoReload)
	}
	want := []ref.Source{{Kind: "Secret", Namespace: "envoy-gateway-system", Name: "envoy-rate-limit"}}
	if diff := cmp.Diff(want, kube.MountedRefs(*tg)); diff != "" {
		t.Errorf("the mounted Secret: -want +got:\n%s", diff)
	}
	p.Annotations = map[string]string{kube.AnnotationHotReload: "true"}
	if tg := targetFor(p, map[kube.Preset]bool{kube.PresetEnvoyGateway: true}); tg == nil || tg.NoHotReload {
		t.Errorf("annotated hot-reload true: target %+v, want one that reloads", tg)
	}
}
