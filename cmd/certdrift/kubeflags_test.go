package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/probe/kube/inventory"
)

// parseAudit parses args as `certdrift audit ...` in process (no binary, no cluster) and returns
// the audit command's flags.
func parseAudit(t *testing.T, env map[string]string, args ...string) (auditCmd, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var c cli
	p, err := kong.New(&c, kong.Name("certdrift"), kong.Exit(func(int) { t.Fatal("kong tried to exit") }))
	if err != nil {
		t.Fatalf("kong.New: %v", err)
	}
	_, err = p.Parse(append([]string{"audit"}, args...))
	return c.Audit, err
}

func writeKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	const kc = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
`
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKubeInventoryFlags(t *testing.T) {
	kc := writeKubeconfig(t)
	type want struct {
		Inventory inventory.Options
		QPS       float32
		Burst     int
	}
	defaults := want{Inventory: inventory.Options{SecretTypes: []string{"kubernetes.io/tls"}, QPS: 50, Burst: 100}, QPS: 50, Burst: 100}
	cases := map[string]struct {
		reason string
		args   []string
		env    map[string]string
		want   want
	}{
		"Defaults": {
			reason: "kubernetes.io/tls only, no ConfigMaps, client-go rate 50/100",
			want:   defaults,
		},
		"ExcludeRepeatedAndCommas": {
			reason: "--exclude-namespace is repeatable and comma-separated",
			args:   []string{"--exclude-namespace", "kube-system", "--exclude-namespace", "a,b"},
			want: want{Inventory: inventory.Options{ExcludeNamespaces: []string{"kube-system", "a", "b"},
				SecretTypes: []string{"kubernetes.io/tls"}, QPS: 50, Burst: 100}, QPS: 50, Burst: 100},
		},
		"SecretTypesReplaceDefault": {
			reason: "--secret-type replaces the default; each type is its own server-side field selector",
			args:   []string{"--secret-type", "kubernetes.io/tls", "--secret-type", "istio.io/key-and-cert"},
			want: want{Inventory: inventory.Options{SecretTypes: []string{"kubernetes.io/tls", "istio.io/key-and-cert"},
				QPS: 50, Burst: 100}, QPS: 50, Burst: 100},
		},
		"Layouts": {
			reason: "--secret-layout reads Opaque Secrets by key pattern; keys in any order, key and ca optional",
			args: []string{"--secret-layout", "cert=cert,key=key,ca=cacert", "--secret-layout", "ca=ca.crt, key=*.key, cert=*.crt", "--secret-layout", "cert=bundle.pem",
				"--secret-layout", "ca=ca.crt"},
			want: want{Inventory: inventory.Options{SecretTypes: []string{"kubernetes.io/tls"}, QPS: 50, Burst: 100,
				Layouts: []inventory.Layout{{Cert: "cert", Key: "key", CA: "cacert"}, {Cert: "*.crt", Key: "*.key", CA: "ca.crt"}, {Cert: "bundle.pem"}, {CA: "ca.crt"}}},
				QPS: 50, Burst: 100},
		},
		"Selectors": {
			reason: "label selectors for Secrets and ConfigMaps, ConfigMaps by name",
			args: []string{"--secret-selector", "certdrift.dev/watch=true,team in (a,b)", "--configmap-selector", "istio.io/config",
				"--configmap", "istio-ca-root-cert,istio-system/extra"},
			want: want{Inventory: inventory.Options{SecretTypes: []string{"kubernetes.io/tls"}, QPS: 50, Burst: 100,
				SecretSelector: "certdrift.dev/watch=true,team in (a,b)", ConfigMapSelector: "istio.io/config",
				ConfigMapNames: []string{"istio-ca-root-cert", "istio-system/extra"}}, QPS: 50, Burst: 100},
		},
		"Rate": {
			reason: "--kube-qps/--kube-burst reach both the rest.Config and the inventory's clients",
			args:   []string{"--kube-qps", "200", "--kube-burst", "400"},
			want:   want{Inventory: inventory.Options{SecretTypes: []string{"kubernetes.io/tls"}, QPS: 200, Burst: 400}, QPS: 200, Burst: 400},
		},
		"Env": {
			reason: "every inventory flag has an environment variable",
			env: map[string]string{"CERTDRIFT_EXCLUDE_NAMESPACE": "x,y", "CERTDRIFT_SECRET_TYPE": "example.com/cert",
				"CERTDRIFT_SECRET_SELECTOR": "a=b", "CERTDRIFT_KUBE_QPS": "5", "CERTDRIFT_KUBE_BURST": "10"},
			want: want{Inventory: inventory.Options{ExcludeNamespaces: []string{"x", "y"}, SecretTypes: []string{"example.com/cert"},
				SecretSelector: "a=b", QPS: 5, Burst: 10}, QPS: 5, Burst: 10},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := parseAudit(t, tc.env, append([]string{"--kubeconfig", kc}, tc.args...)...)
			if err != nil {
				t.Fatalf("%s\nparse: %v", tc.reason, err)
			}
			if err := c.kubeFlags.validate(); err != nil {
				t.Fatalf("%s\nvalidate: %v", tc.reason, err)
			}
			opts, err := c.kubeFlags.options(gather.Options{})
			if err != nil {
				t.Fatalf("%s\noptions: %v", tc.reason, err)
			}
			rc, err := c.kubeFlags.restConfig()
			if err != nil {
				t.Fatalf("%s\nrestConfig: %v", tc.reason, err)
			}
			got := want{Inventory: opts.InventoryOptions(), QPS: rc.QPS, Burst: rc.Burst}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(inventory.Options{}, "Logger", "OnChange", "Now")); diff != "" {
				t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestKubeInventoryFlagErrors(t *testing.T) {
	kc := writeKubeconfig(t)
	cases := map[string]struct {
		reason string
		args   []string
		want   []string // each in the error
	}{
		"NamespaceAndExclude": {reason: "a namespace list and an exclusion list contradict each other",
			args: []string{"--namespace", "a", "--exclude-namespace", "b"}, want: []string{"--namespace", "--exclude-namespace", "exclusive"}},
		"BadExclude": {reason: "an excluded namespace must be a namespace name",
			args: []string{"--exclude-namespace", "Not_A_NS"}, want: []string{"--exclude-namespace", "Not_A_NS"}},
		"Opaque": {reason: "Opaque is read through layouts, and the error says so",
			args: []string{"--secret-type", "Opaque"}, want: []string{"--secret-type Opaque", "--secret-layout"}},
		"BadType": {reason: "a type with selector syntax in it would change the field selector",
			args: []string{"--secret-type", "a!=b"}, want: []string{"--secret-type", "a!=b"}},
		"LayoutNoCert": {reason: "a layout needs its certificate key, or a CA key alone",
			args: []string{"--secret-layout", "key=tls.key"}, want: []string{"--secret-layout", "cert=", "ca="}},
		"LayoutKeyWithCAOnly": {reason: "a private key without a certificate describes nothing",
			args: []string{"--secret-layout", "ca=ca.crt,key=tls.key"}, want: []string{"--secret-layout", "key=<key> needs cert="}},
		"LayoutCAStar": {reason: "a CA-only layout has no item names",
			args: []string{"--secret-layout", "ca=*.crt"}, want: []string{"--secret-layout", "*"}},
		"LayoutUnknownPart": {reason: "only cert, key and ca",
			args: []string{"--secret-layout", "cert=a,chain=b"}, want: []string{"chain"}},
		"LayoutStars": {reason: "a * in cert needs one in key",
			args: []string{"--secret-layout", "cert=*.crt,key=tls.key"}, want: []string{"*"}},
		"LayoutBadKey": {reason: "keys are Secret data keys",
			args: []string{"--secret-layout", "cert=a/b"}, want: []string{"a/b", "not a Secret key"}},
		"LayoutTwice": {reason: "a part given twice is a mistake",
			args: []string{"--secret-layout", "cert=a,cert=b"}, want: []string{"cert given twice"}},
		"BadSecretSelector": {reason: "selectors are parsed before anything is listed",
			args: []string{"--secret-selector", "a in (b"}, want: []string{"--secret-selector"}},
		"BadConfigMapSelector": {reason: "selectors are parsed before anything is listed",
			args: []string{"--configmap-selector", "==x"}, want: []string{"--configmap-selector"}},
		"NegativeQPS": {reason: "rates are not negative",
			args: []string{"--kube-qps", "-1"}, want: []string{"--kube-qps"}},
		"BurstBelowQPS": {reason: "client-go's token bucket never reaches a QPS above its burst",
			args: []string{"--kube-qps", "100", "--kube-burst", "10"}, want: []string{"--kube-burst 10", "--kube-qps 100"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := parseAudit(t, nil, append([]string{"--kubeconfig", kc}, tc.args...)...)
			if err == nil {
				err = c.kubeFlags.validate()
			}
			if err == nil {
				t.Fatalf("%s\nno error for %v", tc.reason, tc.args)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s\nerror %q does not mention %q", tc.reason, err, w)
				}
			}
		})
	}
}

// TestKubeInventoryFlagsExit2: a bad inventory flag stops the binary before it reads the cluster.
func TestKubeInventoryFlagsExit2(t *testing.T) {
	r := certdrift(t, nil, "audit", "--kubeconfig", writeKubeconfig(t), "--secret-type", "Opaque")
	if r.code != codeNoRun || !strings.Contains(r.stderr, "--secret-layout") {
		t.Errorf("want exit %d naming --secret-layout\n%s", codeNoRun, r)
	}
}

// TestAdminSessionFlags: --admin-idle-timeout and --admin-max-sessions reach gather.KubeOptions
// for audit and serve alike, from flags or the environment; 0 (unset) leaves gather its defaults.
func TestAdminSessionFlags(t *testing.T) {
	kc := writeKubeconfig(t)
	type want struct {
		Idle time.Duration
		Max  int
	}
	cases := map[string]struct {
		reason  string
		command string
		args    []string
		env     map[string]string
		want    want
	}{
		"AuditDefaults": {reason: "unset: gather's per-command defaults apply (KubeOnce 8, Start 256, 2m)", command: "audit"},
		"ServeDefaults": {reason: "unset: gather's per-command defaults apply", command: "serve"},
		"AuditFlags": {reason: "flags reach the one-shot audit", command: "audit",
			args: []string{"--admin-idle-timeout", "45s", "--admin-max-sessions", "32"}, want: want{45 * time.Second, 32}},
		"ServeFlags": {reason: "flags reach serve", command: "serve",
			args: []string{"--admin-idle-timeout", "5m", "--admin-max-sessions", "1000"}, want: want{5 * time.Minute, 1000}},
		"ServeEnv": {reason: "each flag has an environment variable", command: "serve",
			env:  map[string]string{"CERTDRIFT_ADMIN_IDLE_TIMEOUT": "90s", "CERTDRIFT_ADMIN_MAX_SESSIONS": "12"},
			want: want{90 * time.Second, 12}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			k, err := parseKubeFlags(t, tc.command, tc.env, append([]string{"--kubeconfig", kc}, tc.args...)...)
			if err == nil {
				err = k.validate()
			}
			if err != nil {
				t.Fatalf("%s\nparse: %v", tc.reason, err)
			}
			opts, err := k.options(gather.Options{})
			if err != nil {
				t.Fatalf("%s\noptions: %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, want{opts.AdminIdleTimeout, opts.AdminMaxSessions}); diff != "" {
				t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
			}
		})
	}
	// serve validates while parsing (its Validate hook), audit when it runs: either way, an error.
	for _, command := range []string{"audit", "serve"} {
		for _, bad := range []string{"--admin-idle-timeout=-1s", "--admin-max-sessions=-2"} {
			k, err := parseKubeFlags(t, command, nil, "--kubeconfig", kc, bad)
			if err == nil {
				err = k.validate()
			}
			if flag, _, _ := strings.Cut(bad, "="); err == nil || !strings.Contains(err.Error(), flag+" ") {
				t.Errorf("%s %s: want an error naming the flag, got %v", command, bad, err)
			}
		}
	}
}

// parseKubeFlags parses `certdrift <command> args...` in process and returns its Kubernetes flags.
func parseKubeFlags(t *testing.T, command string, env map[string]string, args ...string) (kubeFlags, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var c cli
	p, err := kong.New(&c, kong.Name("certdrift"), kong.Exit(func(int) { t.Fatal("kong tried to exit") }))
	if err != nil {
		t.Fatalf("kong.New: %v", err)
	}
	_, err = p.Parse(append([]string{command}, args...))
	if command == "serve" {
		return c.Serve.kubeFlags, err
	}
	return c.Audit.kubeFlags, err
}
