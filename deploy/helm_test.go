package deploy

// Tests of the Helm chart (helm/certdrift) with the helm CLI that `make helm` builds: lint,
// render per profile, schema rejections, the embedded rules and dashboards against their
// sources, RBAC against the kustomize overlays, and on the testbed: a server-side dry run of
// every render with the prometheus-operator CRDs installed, then real installs asked
// `kubectl auth can-i`.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/certdrift/certdrift/test/testbed"
)

const (
	helmVersion = "v3.22.0"
	chartDir    = "helm/certdrift"
	// The release is named like the chart and installed into "certdrift", so that its objects
	// have the kustomize base's names and the two can be compared object by object.
	release, releaseNS = "certdrift", "certdrift"
)

// helmCases are the renders every test below works on: each RBAC profile, repair on, every
// optional object on, and the tuning values of testdata/values/.
var helmCases = []helmCase{
	{name: "cluster-readonly", kustomize: "cluster-readonly"},
	{name: "namespaced", set: []string{"rbac.profile=namespaced", "rbac.namespaces={shop,edge}"}, kustomize: "namespaced"},
	{name: "port-forward", set: []string{"rbac.portForward.enabled=true", "rbac.portForward.namespaces={edge}"}, kustomize: "port-forward"},
	{name: "namespaced-port-forward", set: []string{"rbac.profile=namespaced", "rbac.namespaces={shop,edge}", "rbac.portForward.enabled=true"}},
	{name: "repair", set: []string{"repair.enabled=true"}, kustomize: "repair"},
	{name: "namespaced-repair", set: []string{"rbac.profile=namespaced", "rbac.namespaces={shop,edge}", "repair.enabled=true"}},
	{name: "repair-scoped", set: []string{"repair.enabled=true", "repair.namespaces={shop}"}},
	{name: "monitors", set: []string{"serviceMonitor.enabled=true", "prometheusRule.enabled=true", "dashboards.enabled=true"}},
	{name: "web-config", set: []string{"webConfig.enabled=true", "webConfig.config.basic_auth_users.prometheus=$2y$10$notarealbcrypthashnotarealbcrypthashnotarealbcrypthas", "config.policy.grace=3m"}},
	{name: "podmonitor-auth", values: []string{"podmonitor-auth.yaml"}},
	{name: "rules-tuned", values: []string{"rules-tuned.yaml"}},
	{name: "runtime-tuned", values: []string{"runtime-tuned.yaml"}},
	{name: "no-cert-manager", set: []string{"rbac.certManager=false"}},
}

type helmCase struct {
	name string
	set  []string
	// values are files in testdata/values/, passed with -f before the --set values.
	values []string
	// kustomize names the overlay whose RBAC must be the same, if any.
	kustomize string
}

// args are the case's -f and --set arguments.
func (c helmCase) args() []string {
	var args []string
	for _, v := range c.values {
		args = append(args, "-f", filepath.Join("testdata", "values", v))
	}
	return append(args, setArgs(c.set)...)
}

// helmBin is the helm CLI built by scripts/build-helm.sh.
func helmBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join("..", ".cache", "helm", helmVersion, "helm")
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("helm not found at %s: build it with `make helm` (scripts/build-helm.sh)", p)
	}
	return p
}

// helm runs the cached helm with its state directories in a temporary directory, so that a
// test never reads or writes the user's ~/.config/helm or ~/.cache/helm.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	bin := helmBin(t)
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

func setArgs(set []string) []string {
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

// helmTemplate renders the chart with the given --set values and decodes its objects.
func helmTemplate(t *testing.T, set []string) ([]byte, []*unstructured.Unstructured) {
	t.Helper()
	return helmTemplateArgs(t, setArgs(set))
}

// helmTemplateArgs renders the chart with the given value arguments (-f, --set, --set-json).
func helmTemplateArgs(t *testing.T, valueArgs []string) ([]byte, []*unstructured.Unstructured) {
	t.Helper()
	args := append([]string{"template", release, chartDir, "--namespace", releaseNS}, valueArgs...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return out, decodeObjects(t, out)
}

func decodeObjects(t *testing.T, b []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode rendered objects: %v", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

// TestHelmImagePullPolicy: the image tag defaults to the chart's appVersion, and the pull policy
// to Always only for the moving tag "latest" (the source tree's appVersion); a release tag or a
// digest is pulled IfNotPresent, and an explicit image.pullPolicy wins.
func TestHelmImagePullPolicy(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cases := map[string]struct {
		set                   []string
		wantImage, wantPolicy string
	}{
		"SourceTreeLatest": {wantImage: "ghcr.io/certdrift/certdrift:latest", wantPolicy: "Always"},
		"ReleaseTag":       {set: []string{"image.tag=v1.2.3"}, wantImage: "ghcr.io/certdrift/certdrift:v1.2.3", wantPolicy: "IfNotPresent"},
		"LatestByDigest": {set: []string{"image.digest=" + digest},
			wantImage: "ghcr.io/certdrift/certdrift:latest@" + digest, wantPolicy: "IfNotPresent"},
		"Explicit": {set: []string{"image.tag=v1.2.3", "image.pullPolicy=Always"},
			wantImage: "ghcr.io/certdrift/certdrift:v1.2.3", wantPolicy: "Always"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, objs := helmTemplate(t, tc.set)
			d := find(objs, "Deployment", releaseNS, "certdrift")
			if d == nil {
				t.Fatal("no Deployment")
			}
			ctr := convert[appsv1.Deployment](t, d).Spec.Template.Spec.Containers[0]
			if ctr.Image != tc.wantImage || string(ctr.ImagePullPolicy) != tc.wantPolicy {
				t.Errorf("image %q pulled %q, want %q pulled %q", ctr.Image, ctr.ImagePullPolicy, tc.wantImage, tc.wantPolicy)
			}
		})
	}
}

func TestHelmLint(t *testing.T) {
	for _, c := range helmCases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", chartDir, "--namespace", releaseNS}, c.args()...)
			if out, err := helm(t, args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestHelmTemplate checks what each render holds before any API server sees it.
func TestHelmTemplate(t *testing.T) {
	common := []string{
		"Deployment certdrift/certdrift", "NetworkPolicy certdrift/certdrift",
		"Service certdrift/certdrift", "ServiceAccount certdrift/certdrift",
	}
	clusterRO := []string{"ClusterRole /certdrift-readonly", "ClusterRoleBinding /certdrift-readonly"}
	nsRO := []string{"Role edge/certdrift-readonly", "Role shop/certdrift-readonly",
		"RoleBinding edge/certdrift-readonly", "RoleBinding shop/certdrift-readonly"}
	leases := []string{"Role certdrift/certdrift-leases", "RoleBinding certdrift/certdrift-leases"}
	policy := []string{"ValidatingAdmissionPolicy /certdrift-repair-restart-only", "ValidatingAdmissionPolicyBinding /certdrift-repair-restart-only"}
	// The helm test hook is rendered unless the metrics port needs credentials (webConfig).
	test := []string{"Pod certdrift/certdrift-healthcheck"}
	webArgs := []string{"--web.config.file=/etc/certdrift/web/web-config.yml", "--web.probe-address=:9810"}
	base := []string{"serve", "--in-cluster", "--web.listen-address=:9809", "--log.level=info", "--log.format=json"}
	cat := func(lists ...[]string) []string { return slices.Concat(lists...) }
	direct, auto := cat(base, []string{"--admin-access=direct"}), cat(base, []string{"--admin-access=auto"})
	nsArgs := func(args []string) []string { return cat(base, []string{"--namespace=shop,edge"}, args[len(base):]) }
	want := map[string]struct {
		objects   []string
		args      []string
		probePort string
	}{
		"cluster-readonly": {objects: cat(common, test, clusterRO), args: direct, probePort: "http-metrics"},
		"namespaced":       {objects: cat(common, test, nsRO), args: nsArgs(direct), probePort: "http-metrics"},
		"port-forward": {objects: cat(common, test, clusterRO, []string{"Role edge/certdrift-portforward", "RoleBinding edge/certdrift-portforward"}),
			args: auto, probePort: "http-metrics"},
		"namespaced-port-forward": {objects: cat(common, test, nsRO, []string{"Role edge/certdrift-portforward", "Role shop/certdrift-portforward",
			"RoleBinding edge/certdrift-portforward", "RoleBinding shop/certdrift-portforward"}),
			args: nsArgs(auto), probePort: "http-metrics"},
		"repair": {objects: cat(common, test, clusterRO, leases, policy,
			[]string{"ClusterRole /certdrift-repair", "ClusterRoleBinding /certdrift-repair"}),
			args: direct, probePort: "http-metrics"},
		"namespaced-repair": {objects: cat(common, test, nsRO, leases, policy,
			[]string{"Role edge/certdrift-repair", "Role shop/certdrift-repair",
				"RoleBinding edge/certdrift-repair", "RoleBinding shop/certdrift-repair"}),
			args: nsArgs(direct), probePort: "http-metrics"},
		"repair-scoped": {objects: cat(common, test, clusterRO, leases, policy,
			[]string{"Role shop/certdrift-repair", "RoleBinding shop/certdrift-repair"}),
			args: direct, probePort: "http-metrics"},
		"monitors": {objects: cat(common, test, clusterRO, []string{
			"ServiceMonitor certdrift/certdrift", "PrometheusRule certdrift/certdrift",
			"ConfigMap certdrift/certdrift-dashboard-overview", "ConfigMap certdrift/certdrift-dashboard-workload"}),
			args: direct, probePort: "http-metrics"},
		"web-config": {objects: cat(common, clusterRO, []string{"Secret certdrift/certdrift-web-config", "ConfigMap certdrift/certdrift-config"}),
			args:      cat(direct, []string{"--config=/etc/certdrift/config/config.yaml"}, webArgs),
			probePort: "http-probes"},
		"no-cert-manager": {objects: cat(common, test, clusterRO), args: cat(direct, []string{"--no-cert-manager"}), probePort: "http-metrics"},
		"podmonitor-auth": {objects: cat(common, clusterRO, []string{"PodMonitor certdrift/certdrift"}),
			args: cat(direct, webArgs), probePort: "http-probes"},
		"rules-tuned": {objects: cat(common, test, clusterRO, []string{"PrometheusRule certdrift/certdrift"}),
			args: direct, probePort: "http-metrics"},
		"runtime-tuned": {objects: cat(common, test, clusterRO, []string{"PodDisruptionBudget certdrift/certdrift"}),
			args: direct, probePort: "http-metrics"},
	}
	for _, c := range helmCases {
		t.Run(c.name, func(t *testing.T) {
			w, ok := want[c.name]
			if !ok {
				t.Fatalf("no expectation for case %s", c.name)
			}
			_, objs := helmTemplateArgs(t, c.args())
			wantIDs := slices.Clone(w.objects)
			slices.Sort(wantIDs)
			if diff := cmp.Diff(wantIDs, ids(objs)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			d := find(objs, "Deployment", releaseNS, "certdrift")
			if d == nil {
				t.Fatal("no Deployment")
			}
			spec := convert[appsv1.Deployment](t, d).Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(spec.Containers))
			}
			ctr := spec.Containers[0]
			if diff := cmp.Diff(w.args, ctr.Args); diff != "" {
				t.Errorf("container args (-want +got):\n%s", diff)
			}
			if ctr.Image != "ghcr.io/certdrift/certdrift:latest" {
				t.Errorf("image %q", ctr.Image)
			}
			if spec.ServiceAccountName != "certdrift" {
				t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
			}
			for name, p := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe} {
				wantPath := map[string]string{"liveness": "/-/healthy", "readiness": "/-/ready"}[name]
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != wantPath || p.HTTPGet.Port.String() != w.probePort {
					t.Errorf("%s probe %+v: want GET %s on port %s", name, p, wantPath, w.probePort)
				}
			}
			psc, sc := spec.SecurityContext, ctr.SecurityContext
			if psc == nil || sc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
				psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("security contexts are not the restricted set: pod %+v, container %+v", psc, sc)
			}
			// The Service, NetworkPolicy and monitors must select the Deployment's pods.
			tmplLabels := convert[appsv1.Deployment](t, d).Spec.Template.Labels
			for _, sel := range []struct {
				kind string
				path []string
			}{
				{"Service", []string{"spec", "selector"}},
				{"NetworkPolicy", []string{"spec", "podSelector", "matchLabels"}},
				{"ServiceMonitor", []string{"spec", "selector", "matchLabels"}},
				{"PodMonitor", []string{"spec", "selector", "matchLabels"}},
				{"PodDisruptionBudget", []string{"spec", "selector", "matchLabels"}},
			} {
				o := find(objs, sel.kind, releaseNS, "certdrift")
				if o == nil {
					continue
				}
				m, _, _ := unstructured.NestedStringMap(o.Object, sel.path...)
				if len(m) == 0 {
					t.Errorf("%s selects nothing at %s", sel.kind, strings.Join(sel.path, "."))
				}
				for k, v := range m {
					if tmplLabels[k] != v {
						t.Errorf("%s selector %s=%s does not match the pod labels %v", sel.kind, k, v, tmplLabels)
					}
				}
			}
			if svc := find(objs, "ServiceMonitor", releaseNS, "certdrift"); svc != nil {
				eps, _, _ := unstructured.NestedSlice(svc.Object, "spec", "endpoints")
				if len(eps) != 1 || eps[0].(map[string]any)["honorLabels"] != true || eps[0].(map[string]any)["port"] != "http-metrics" {
					t.Errorf("ServiceMonitor endpoints %v: want one on http-metrics with honorLabels", eps)
				}
			}
		})
	}
}

// TestHelmSchemaRejects shows values.schema.json (or a template guard) refusing bad values
// with a message that names the field.
func TestHelmSchemaRejects(t *testing.T) {
	cases := map[string]struct {
		reason string
		set    []string
		// json are --set-json values, for lists and numbers.
		json []string
		want []string
	}{
		"BogusProfile": {
			reason: "only the two profiles exist",
			set:    []string{"rbac.profile=bogus"},
			want:   []string{"rbac", "profile"},
		},
		"UnknownKey": {
			reason: "a typo must not be ignored",
			set:    []string{"serviceMonitr.enabled=true"},
			want:   []string{"serviceMonitr"},
		},
		"NamespacedWithoutNamespaces": {
			reason: "a namespaced install with no namespace would audit nothing",
			set:    []string{"rbac.profile=namespaced"},
			want:   []string{"namespaces"},
		},
		"NamespacesWithClusterProfile": {
			reason: "a namespace list is ignored by the cluster-wide profile: say so instead",
			set:    []string{"rbac.namespaces={shop}"},
			want:   []string{"namespaces"},
		},
		"BadLogLevel": {
			reason: "certdrift would refuse to start",
			set:    []string{"log.level=loud"},
			want:   []string{"level"},
		},
		"ExtraArgNotAFlag": {
			reason: "a stray positional argument would make certdrift exit",
			set:    []string{"extraArgs={audit}"},
			want:   []string{"extraArgs"},
		},
		"WrongType": {
			reason: "repair.enabled is a boolean",
			set:    []string{"repair.enabled=maybe"},
			want:   []string{"repair", "enabled"},
		},
		"PortForwardWithoutNamespaces": {
			reason: "port-forward is write access: the cluster-wide profile must say where",
			set:    []string{"rbac.portForward.enabled=true"},
			want:   []string{"rbac.portForward.namespaces", "clusterWide"},
		},
		"PortForwardOutsideProfile": {
			reason: "port-forward where certdrift does not audit",
			set:    []string{"rbac.profile=namespaced", "rbac.namespaces={shop}", "rbac.portForward.enabled=true", "rbac.portForward.namespaces={other}"},
			want:   []string{"rbac.portForward.namespaces", "other"},
		},
		"PortForwardClusterWideNamespaced": {
			reason: "a cluster-wide port-forward contradicts the namespaced profile",
			set:    []string{"rbac.profile=namespaced", "rbac.namespaces={shop}", "rbac.portForward.enabled=true", "rbac.portForward.clusterWide=true"},
			want:   []string{"clusterWide", "namespaced"},
		},
		"PortForwardNamespacesWhenOff": {
			reason: "namespaces for a port-forward that is off would be ignored",
			set:    []string{"rbac.portForward.namespaces={edge}"},
			want:   []string{"rbac.portForward.enabled"},
		},
		"RepairOutsideProfile": {
			reason: "repair where certdrift does not audit",
			set:    []string{"rbac.profile=namespaced", "rbac.namespaces={shop}", "repair.enabled=true", "repair.namespaces={other}"},
			want:   []string{"repair.namespaces", "other"},
		},
		"RepairNamespacesWhenOff": {
			reason: "namespaces for a repair that is off would be ignored",
			set:    []string{"repair.namespaces={shop}"},
			want:   []string{"repair.enabled"},
		},
		"RepairNamespaceNotAName": {
			reason: "not a namespace name",
			set:    []string{"repair.enabled=true", "repair.namespaces={Shop_1}"},
			want:   []string{"repair", "namespaces"},
		},
		"WebConfigWithoutContent": {
			reason: "an empty web config would fail at start, not at install",
			set:    []string{"webConfig.enabled=true"},
			want:   []string{"webConfig.config"},
		},
		"BothMonitors": {
			reason: "a ServiceMonitor and a PodMonitor scrape every series twice",
			set:    []string{"serviceMonitor.enabled=true", "podMonitor.enabled=true"},
			want:   []string{"serviceMonitor.enabled", "podMonitor.enabled", "twice"},
		},
		"BasicAuthAndAuthorization": {
			reason: "Prometheus takes one way of authenticating a scrape",
			set: []string{"serviceMonitor.enabled=true", "serviceMonitor.basicAuth.username.name=s", "serviceMonitor.basicAuth.username.key=u",
				"serviceMonitor.basicAuth.password.name=s", "serviceMonitor.basicAuth.password.key=p",
				"serviceMonitor.authorization.credentials.name=s", "serviceMonitor.authorization.credentials.key=t"},
			want: []string{"basicAuth or authorization"},
		},
		"BasicAuthWithoutPassword": {
			reason: "a username alone cannot authenticate",
			set:    []string{"podMonitor.basicAuth.username.name=s", "podMonitor.basicAuth.username.key=u"},
			want:   []string{"podMonitor", "basicAuth", "password"},
		},
		"UnknownAlert": {
			reason: "an override of an alert the rule file does not have (a typo, a rename) must not be ignored",
			set:    []string{"prometheusRule.enabled=true", "prometheusRule.alerts.CertdriftNoSuchAlert.disabled=true"},
			want:   []string{"prometheusRule.alerts.CertdriftNoSuchAlert", "matches no alert"},
		},
		"UnknownAlertSeverity": {
			reason: "CertdriftAbsent exists only at warning",
			set:    []string{"prometheusRule.enabled=true", "prometheusRule.alerts.CertdriftAbsent/critical.for=1h"},
			want:   []string{"CertdriftAbsent/critical", "matches no alert"},
		},
		"UnknownOverrideField": {
			reason: "a misspelt override field is refused",
			set:    []string{"prometheusRule.alerts.CertdriftAbsent.severty=critical"},
			want:   []string{"severty"},
		},
		"BadRuleDuration": {
			reason: "for: must be a Prometheus duration",
			set:    []string{"prometheusRule.alerts.CertdriftAbsent.for=5 minutes"},
			want:   []string{"CertdriftAbsent", "for"},
		},
		"RepeatedGroup": {
			reason: "Prometheus refuses a rule file with a group name twice",
			set:    []string{"prometheusRule.enabled=true"},
			json:   []string{`prometheusRule.extraGroups=[{"name":"certdrift.drift","rules":[{"record":"x:y","expr":"vector(1)"}]}]`},
			want:   []string{"extraGroups", "certdrift.drift"},
		},
		"RunbookBaseWithAnchor": {
			reason: "the anchor comes from each alert",
			set:    []string{"prometheusRule.runbookBaseURL=https://wiki.example.com/x#y"},
			want:   []string{"runbookBaseURL"},
		},
		"GoMemLimitRatioAboveOne": {
			reason: "GOMEMLIMIT above the container limit means the GC never helps before the OOM kill",
			json:   []string{"goMemLimitRatio=1.5"},
			want:   []string{"goMemLimitRatio"},
		},
		"MemoryLimitNotAQuantity": {
			reason: "256MB is not a Kubernetes quantity; the chart cannot compute GOMEMLIMIT from it",
			set:    []string{"resources.limits.memory=256MB"},
			want:   []string{"resources.limits.memory", "GOMEMLIMIT"},
		},
		"EnvRepeatsChartVariable": {
			reason: "POD_NAME is the chart's; a second one would silently win or lose",
			set:    []string{"env.POD_NAME=x"},
			want:   []string{"POD_NAME", "twice"},
		},
		"PDBBoth": {
			reason: "Kubernetes refuses a PodDisruptionBudget with minAvailable and maxUnavailable",
			set:    []string{"podDisruptionBudget.enabled=true", "podDisruptionBudget.minAvailable=1", "podDisruptionBudget.maxUnavailable=1"},
			want:   []string{"minAvailable", "maxUnavailable"},
		},
		"NetworkPolicyWithoutPeers": {
			reason: "a policy admitting nobody blocks every scrape",
			set:    []string{"networkPolicy.prometheusNamespace="},
			want:   []string{"prometheusNamespace"},
		},
		"TestAddressNotHostPort": {
			reason: "certdrift healthcheck takes HOST:PORT",
			set:    []string{"tests.address=http://certdrift:9809/metrics"},
			want:   []string{"tests", "address"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"template", release, chartDir, "--namespace", releaseNS}, setArgs(tc.set)...)
			for _, j := range tc.json {
				args = append(args, "--set-json", j)
			}
			out, err := helm(t, args...)
			if err == nil {
				t.Fatalf("%s: helm template accepted %v:\n%.400s", tc.reason, tc.set, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: the error does not name %q:\n%v", tc.reason, w, err)
				}
			}
		})
	}
}

// TestChartCopies: the chart carries copies of the rules and dashboards (Helm can read only
// files inside the chart); they must be the sources byte for byte.
func TestChartCopies(t *testing.T) {
	pairs := map[string]string{
		filepath.Join("..", "alerts", "certdrift.rules.yaml"): filepath.Join(chartDir, "files", "certdrift.rules.yaml"),
	}
	srcDash, err := filepath.Glob(filepath.Join("..", "dashboards", "*.json"))
	if err != nil || len(srcDash) == 0 {
		t.Fatalf("no dashboards/*.json (%v)", err)
	}
	for _, s := range srcDash {
		pairs[s] = filepath.Join(chartDir, "files", "dashboards", filepath.Base(s))
	}
	chartDash, _ := filepath.Glob(filepath.Join(chartDir, "files", "dashboards", "*"))
	var wantNames, gotNames []string
	for _, s := range srcDash {
		wantNames = append(wantNames, filepath.Base(s))
	}
	for _, c := range chartDash {
		gotNames = append(gotNames, filepath.Base(c))
	}
	if diff := cmp.Diff(wantNames, gotNames); diff != "" {
		t.Errorf("chart dashboards differ from dashboards/*.json (-want +got):\n%s", diff)
	}
	for src, cp := range pairs {
		a, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(cp)
		if err != nil {
			t.Fatalf("%v (copy %s into the chart)", err, src)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: run `cp %s %s`", cp, src, src, cp)
		}
	}
}

// TestHelmEmbeds checks that the PrometheusRule holds the rule file's groups unchanged (the
// rules' own {{ $labels.x }} templates included) and each dashboard ConfigMap its JSON.
func TestHelmEmbeds(t *testing.T) {
	_, objs := helmTemplate(t, []string{"prometheusRule.enabled=true", "dashboards.enabled=true"})
	src, err := os.ReadFile(filepath.Join("..", "alerts", "certdrift.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(src), 4096).Decode(&file); err != nil {
		t.Fatalf("alerts/certdrift.rules.yaml: %v", err)
	}
	pr := find(objs, "PrometheusRule", releaseNS, "certdrift")
	if pr == nil {
		t.Fatal("no PrometheusRule")
	}
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	if len(groups) == 0 {
		t.Fatal("PrometheusRule has no spec.groups")
	}
	if diff := cmp.Diff(file["groups"], any(groups)); diff != "" {
		t.Errorf("PrometheusRule spec.groups differ from alerts/certdrift.rules.yaml (-file +rule):\n%s", diff)
	}
	if !strings.Contains(fmt.Sprint(groups), "{{ $labels.") {
		t.Error("the rules' {{ $labels.* }} annotation templates did not survive rendering")
	}

	dash, _ := filepath.Glob(filepath.Join("..", "dashboards", "*.json"))
	seen := 0
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		if o.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("ConfigMap %s lacks the grafana_dashboard=1 label", o.GetName())
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		for key, v := range data {
			b, err := os.ReadFile(filepath.Join("..", "dashboards", key))
			if err != nil {
				t.Errorf("ConfigMap %s key %s: no such dashboard: %v", o.GetName(), key, err)
				continue
			}
			if v != strings.TrimSuffix(string(b), "\n") {
				t.Errorf("ConfigMap %s key %s differs from dashboards/%s", o.GetName(), key, key)
			}
			if !json.Valid([]byte(v)) {
				t.Errorf("ConfigMap %s key %s is not valid JSON", o.GetName(), key)
			}
			seen++
		}
	}
	if seen != len(dash) {
		t.Errorf("%d dashboards in ConfigMaps, want %d", seen, len(dash))
	}
}

// policy is the substance of a render's RBAC: rules per Role/ClusterRole and roleRef+subjects
// per binding, with list order normalised away.
func policy(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, o := range objs {
		id := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		switch o.GetKind() {
		case "Role", "ClusterRole":
			r := convert[rbacv1.ClusterRole](t, o)
			var rules []rbacv1.PolicyRule
			for _, rule := range r.Rules {
				for _, s := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames, rule.NonResourceURLs} {
					slices.Sort(s)
				}
				rules = append(rules, rule)
			}
			slices.SortFunc(rules, func(a, b rbacv1.PolicyRule) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
			out[id] = rules
		case "RoleBinding", "ClusterRoleBinding":
			b := convert[rbacv1.ClusterRoleBinding](t, o)
			out[id] = struct {
				RoleRef  rbacv1.RoleRef
				Subjects []rbacv1.Subject
			}{b.RoleRef, b.Subjects}
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			// What the API server enforces is the spec: every expression, as written.
			out[id] = o.Object["spec"]
		}
	}
	return out
}

// TestHelmRBACMatchesKustomize: the chart and the kustomize overlays grant the same, profile by
// profile, and enforce the same admission policy, so that choosing an install method never
// changes what certdrift may do.
func TestHelmRBACMatchesKustomize(t *testing.T) {
	for _, c := range helmCases {
		if c.kustomize == "" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			_, k := render(t, c.kustomize)
			_, h := helmTemplateArgs(t, c.args())
			kp, hp := policy(t, k), policy(t, h)
			if len(kp) == 0 {
				t.Fatalf("kustomize overlay %s has no RBAC", c.kustomize)
			}
			if diff := cmp.Diff(kp, hp); diff != "" {
				t.Errorf("RBAC differs from kustomize overlay %s (-kustomize +helm):\n%s", c.kustomize, diff)
			}
		})
	}
}

// TestCRDChecksums: deploy/crds/ holds the prometheus-operator CRDs unchanged, as its README's
// table records.
func TestCRDChecksums(t *testing.T) {
	f, err := os.Open(filepath.Join("crds", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "|")
		if len(cols) == 4 && strings.HasSuffix(strings.TrimSpace(cols[1]), ".yaml") {
			want[strings.TrimSpace(cols[1])] = strings.TrimSpace(cols[2])
		}
	}
	files, _ := filepath.Glob(filepath.Join("crds", "*.yaml"))
	got := map[string]string{}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		got[filepath.Base(p)] = hex.EncodeToString(sum[:])
		objs := decodeObjects(t, b)
		if len(objs) != 1 || objs[0].GetKind() != "CustomResourceDefinition" || !strings.HasSuffix(objs[0].GetName(), ".monitoring.coreos.com") {
			t.Errorf("%s: want one monitoring.coreos.com CustomResourceDefinition, got %v", p, ids(objs))
		}
	}
	if len(want) != 3 {
		t.Errorf("crds/README.md lists %d files, want 3", len(want))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("crds/*.yaml differ from crds/README.md (-readme +files):\n%s", diff)
	}
}

// TestHelmOnAPIServer validates every render against a real kube-apiserver holding the
// prometheus-operator CRDs, then installs the chart with helm and asks what the ServiceAccount
// may do.
func TestHelmOnAPIServer(t *testing.T) {
	rendered := map[string][]byte{}
	objects := map[string][]*unstructured.Unstructured{}
	for _, c := range helmCases {
		rendered[c.name], objects[c.name] = helmTemplateArgs(t, c.args())
	}
	helmBin(t)
	tb := testbed.StartT(t, testbed.Options{Nodes: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	k := func(args ...string) ([]byte, error) { return tb.Kubectl(ctx, args...) }
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The chart does not create its namespace (Helm's convention); the one it goes into gets
	// the restricted Pod Security level, as docs/operate.md tells users to do.
	nsYAML := `apiVersion: v1
kind: Namespace
metadata:
  name: certdrift
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
`
	if out, err := k("apply", "-f", write("ns.yaml", []byte(nsYAML))); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, ns := range []string{"shop", "edge", "other"} {
		if out, err := k("create", "namespace", ns); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// create, not apply: the CRDs are too big for the last-applied annotation.
	if out, err := k("create", "-f", "crds"); err != nil {
		t.Fatalf("install the prometheus-operator CRDs: %v\n%s", err, out)
	}
	if out, err := k("wait", "--for=condition=Established", "--timeout=60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/podmonitors.monitoring.coreos.com",
		"crd/prometheusrules.monitoring.coreos.com"); err != nil {
		t.Fatalf("CRDs not established: %v\n%s", err, out)
	}

	for _, c := range helmCases {
		t.Run("DryRun/"+c.name, func(t *testing.T) {
			out, err := k("apply", "--dry-run=server", "-f", write(c.name+".yaml", rendered[c.name]))
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if n := strings.Count(string(out), "(server dry run)"); n != len(objects[c.name]) {
				t.Errorf("%d objects accepted in the dry run, want %d:\n%s", n, len(objects[c.name]), out)
			}
		})
	}

	// The control: the CRD schemas are really enforced, so a ServiceMonitor the operator
	// would not understand is refused; without it the dry runs above prove less.
	t.Run("DryRun/CRDSchemaEnforced", func(t *testing.T) {
		sm := find(objects["monitors"], "ServiceMonitor", releaseNS, "certdrift")
		if sm == nil {
			t.Fatal("no ServiceMonitor in the monitors render")
		}
		bad := sm.DeepCopy()
		eps, _, _ := unstructured.NestedSlice(bad.Object, "spec", "endpoints")
		eps[0].(map[string]any)["interval"] = "every-30s"
		if err := unstructured.SetNestedSlice(bad.Object, eps, "spec", "endpoints"); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(bad.Object)
		out, err := k("apply", "--dry-run=server", "-f", write("bad-sm.json", b))
		if err == nil || !strings.Contains(string(out)+err.Error(), "interval") {
			t.Fatalf("a ServiceMonitor with interval %q was not refused (err %v):\n%s", "every-30s", err, out)
		}
	})

	// Pod Security: the Deployment's pod, with the most volumes (web-config), is admitted under
	// the restricted level. A Deployment is only warned about, so the pod itself is created.
	t.Run("PodSecurityRestricted", func(t *testing.T) {
		dep := convert[appsv1.Deployment](t, find(objects["web-config"], "Deployment", releaseNS, "certdrift"))
		pod := corev1.Pod{TypeMeta: metav1TypeMeta("v1", "Pod"), ObjectMeta: dep.Spec.Template.ObjectMeta, Spec: dep.Spec.Template.Spec}
		pod.Name, pod.Namespace = "certdrift-helm-psa", releaseNS
		// ServiceAccount admission needs the account; it goes again before helm install, which
		// refuses to adopt objects it did not create.
		saFile := write("sa.yaml", []byte("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: certdrift\n  namespace: certdrift\n"))
		if out, err := k("apply", "-f", saFile); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		defer func() {
			if out, err := k("delete", "--wait", "-f", saFile); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		}()
		b, _ := json.Marshal(pod)
		if out, err := k("create", "--dry-run=server", "-f", write("pod.json", b)); err != nil {
			t.Fatalf("the chart's pod is not admitted under the restricted level: %v\n%s", err, out)
		}
		// With the security-context overrides of runtime-tuned.yaml (another user id, a
		// container-level seccomp profile), and the helm test hook's pod.
		tuned := convert[appsv1.Deployment](t, find(objects["runtime-tuned"], "Deployment", releaseNS, "certdrift"))
		tpod := corev1.Pod{TypeMeta: metav1TypeMeta("v1", "Pod"), ObjectMeta: tuned.Spec.Template.ObjectMeta, Spec: tuned.Spec.Template.Spec}
		tpod.Name, tpod.Namespace = "certdrift-helm-psa-tuned", releaseNS
		tb, _ := json.Marshal(tpod)
		if out, err := k("create", "--dry-run=server", "-f", write("pod-tuned.json", tb)); err != nil {
			t.Errorf("the runtime-tuned pod is not admitted under the restricted level: %v\n%s", err, out)
		}
		hook := find(objects["cluster-readonly"], "Pod", releaseNS, "certdrift-healthcheck")
		if hook == nil {
			t.Fatal("no helm test Pod in the cluster-readonly render")
		}
		hb, _ := json.Marshal(hook.Object)
		if out, err := k("create", "--dry-run=server", "-f", write("pod-hook.json", hb)); err != nil {
			t.Errorf("the helm test pod is not admitted under the restricted level: %v\n%s", err, out)
		}
		pod.Spec.SecurityContext.RunAsNonRoot = nil
		pod.Spec.SecurityContext.RunAsUser = nil
		pod.Spec.Containers[0].SecurityContext.RunAsNonRoot = nil
		zero := int64(0)
		pod.Spec.Containers[0].SecurityContext.RunAsUser = &zero
		b, _ = json.Marshal(pod)
		out, err := k("create", "--dry-run=server", "-f", write("pod-root.json", b))
		if err == nil || !strings.Contains(string(out)+err.Error(), "violates PodSecurity") {
			t.Fatalf("a root pod was not refused by Pod Security admission (err %v):\n%s", err, out)
		}
	})

	type can struct {
		verb, resource, ns string
		want               bool
	}
	never := []can{
		{"create", "leases.coordination.k8s.io", "kube-system", false},
		{"update", "leases.coordination.k8s.io", "kube-node-lease", false},
		{"create", "leases.coordination.k8s.io", "shop", false},
		{"create", "pods", "shop", false},
		{"delete", "pods", "shop", false},
		{"update", "secrets", "shop", false},
	}
	installs := []struct {
		name string
		cans []can
	}{
		{"cluster-readonly", append([]can{
			{"list", "secrets", "*", true},
			{"get", "replicasets.apps", "shop", true},
			{"create", "pods/portforward", "other", false},
			{"create", "pods/eviction", "shop", false},
			{"patch", "deployments.apps", "shop", false},
			{"create", "events", "shop", false},
			{"create", "leases.coordination.k8s.io", "certdrift", false},
		}, never...)},
		{"namespaced", append([]can{
			{"list", "secrets", "shop", true},
			{"watch", "pods", "edge", true},
			{"create", "pods/portforward", "edge", false},
			{"list", "secrets", "other", false},
			{"list", "secrets", "*", false},
			{"create", "pods/eviction", "shop", false},
			{"patch", "deployments.apps", "shop", false},
		}, never...)},
		{"port-forward", append([]can{
			{"create", "pods/portforward", "edge", true},
			{"create", "pods/portforward", "shop", false},
			{"create", "pods/portforward", "kube-system", false},
		}, never...)},
		{"namespaced-port-forward", append([]can{
			{"create", "pods/portforward", "edge", true},
			{"create", "pods/portforward", "shop", true},
			{"create", "pods/portforward", "other", false},
		}, never...)},
		{"repair", append([]can{
			{"list", "secrets", "*", true},
			{"create", "pods/eviction", "shop", true},
			{"patch", "deployments.apps", "other", true},
			{"patch", "statefulsets.apps", "edge", true},
			{"create", "events.events.k8s.io", "shop", true},
			{"update", "leases.coordination.k8s.io", "certdrift", true},
			{"create", "leases.coordination.k8s.io", "certdrift", true},
			{"create", "pods/portforward", "shop", false},
		}, never...)},
		{"namespaced-repair", append([]can{
			{"create", "pods/eviction", "shop", true},
			{"patch", "daemonsets.apps", "edge", true},
			{"create", "events", "edge", true},
			{"create", "pods/eviction", "other", false},
			{"patch", "deployments.apps", "other", false},
			{"list", "secrets", "other", false},
			{"update", "leases.coordination.k8s.io", "certdrift", true},
		}, never...)},
		{"repair-scoped", append([]can{
			{"list", "secrets", "*", true},
			{"create", "pods/eviction", "shop", true},
			{"patch", "deployments.apps", "shop", true},
			{"create", "pods/eviction", "edge", false},
			{"patch", "deployments.apps", "edge", false},
			{"patch", "statefulsets.apps", "other", false},
			{"create", "leases.coordination.k8s.io", "certdrift", true},
		}, never...)},
	}
	for _, in := range installs {
		t.Run("Install/"+in.name, func(t *testing.T) {
			var set []string
			for _, c := range helmCases {
				if c.name == in.name {
					set = c.set
				}
			}
			args := append([]string{"install", release, chartDir, "--namespace", releaseNS,
				"--kubeconfig", tb.KubeconfigPath, "--timeout", "2m"}, setArgs(set)...)
			if out, err := helm(t, args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, c := range in.cans {
				got, answer := canI(ctx, t, k, c.verb, c.resource, c.ns, c.want)
				if got != c.want {
					t.Errorf("%s: can-i %s %s -n %s = %v, want %v (%s)", in.name, c.verb, c.resource, c.ns, got, c.want, answer)
				}
			}
			realRequests(ctx, t, tb, in.name)
			if out, err := helm(t, "uninstall", release, "--namespace", releaseNS, "--kubeconfig", tb.KubeconfigPath, "--wait", "--timeout", "2m"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}
