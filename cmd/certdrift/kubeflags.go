package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/adminaccess"
	"github.com/certdrift/certdrift/probe/kube/inventory"
)

// kubeFlags are the Kubernetes-mode flags, shared by `audit` and `serve` so that both read a
// cluster the same way.
type kubeFlags struct {
	Kubeconfig  string        `type:"path" placeholder:"FILE" env:"CERTDRIFT_KUBECONFIG" help:"Audit the Envoy pods of the cluster in this kubeconfig."`
	InCluster   bool          `name:"in-cluster" env:"CERTDRIFT_IN_CLUSTER" help:"Kubernetes mode with the pod's ServiceAccount (when certdrift runs in the cluster)."`
	Context     string        `name:"context" env:"CERTDRIFT_CONTEXT" help:"Kubeconfig context (default: its current context)."`
	Namespace   []string      `name:"namespace" sep:"," env:"CERTDRIFT_NAMESPACE" help:"Only these namespaces (repeatable or comma-separated); namespace-scoped Roles suffice."`
	Selector    []string      `name:"selector" sep:"none" env:"CERTDRIFT_SELECTOR" help:"Only pods matching this label selector (repeatable: a pod matching any is considered)."`
	Preset      []string      `name:"preset" sep:"," env:"CERTDRIFT_PRESET" help:"Kinds of Envoy to discover (envoy, istio, envoy-gateway, annotated; default all)."`
	AdminAccess string        `name:"admin-access" default:"auto" enum:"auto,direct,port-forward" env:"CERTDRIFT_ADMIN_ACCESS" help:"Reach Envoy admins by pod IP, API-server port-forward, or auto (pod IP, else port-forward): ${enum}."`
	SyncTimeout time.Duration `default:"30s" env:"CERTDRIFT_SYNC_TIMEOUT" help:"How long to wait for the initial list of Secrets and pods."`
	// The port-forward sessions to Envoy admins (issue 20): serve keeps them from round to round,
	// because setting one up per pod per round made port-forward rounds twice as long as direct
	// ones. 0 leaves each command its own default (gather.KubeOptions).
	AdminIdleTimeout time.Duration `name:"admin-idle-timeout" placeholder:"DURATION" env:"CERTDRIFT_ADMIN_IDLE_TIMEOUT" help:"Close a port-forward session to an Envoy admin after it was unused this long (0: 2m, longer than serve's --interval so that sessions last from one round to the next; keep it so if you raise --interval)."`
	AdminMaxSessions int           `name:"admin-max-sessions" placeholder:"N" env:"CERTDRIFT_ADMIN_MAX_SESSIONS" help:"Port-forward sessions to Envoy admins open at once; a new one waits for a free one, closing idle sessions of other pods first (0: 256 for serve, a session per pod kept across rounds up to that many Envoys; 8 for a one-shot audit)."`

	// Inventory: what the API server sends. Every filter here is applied server-side (field and
	// label selectors), because memory and API-server load are what users hold against peer tools.
	ExcludeNamespace  []string `name:"exclude-namespace" sep:"," env:"CERTDRIFT_EXCLUDE_NAMESPACE" help:"Leave out these namespaces (repeatable or comma-separated; not with --namespace)."`
	SecretType        []string `name:"secret-type" sep:"," default:"kubernetes.io/tls" env:"CERTDRIFT_SECRET_TYPE" help:"Secret types read with the tls.crt/tls.key/ca.crt layout, one server-side field selector each (repeatable). Opaque Secrets are read through --secret-layout."`
	SecretLayout      []string `name:"secret-layout" sep:"none" placeholder:"cert=K,key=K,ca=K" env:"CERTDRIFT_SECRET_LAYOUT" help:"Also read Opaque Secrets with these keys (repeatable), e.g. cert=cert,key=key,ca=cacert (Istio generic), cert=*.crt,key=*.key,ca=ca.crt (one item per name), or ca=ca.crt alone for trust-bundle Secrets holding no certificate (applied when no cert layout matches). Without it, Opaque Secrets that Envoy pods mount or name are still read, with ca.crt or cacert as a CA-only bundle."`
	SecretSelector    string   `name:"secret-selector" env:"CERTDRIFT_SECRET_SELECTOR" help:"Only Secrets matching this label selector (applied by the API server)."`
	ConfigMapSelector string   `name:"configmap-selector" env:"CERTDRIFT_CONFIGMAP_SELECTOR" help:"Read CA-bundle ConfigMaps matching this label selector (none are read without it or --configmap)."`
	ConfigMap         []string `name:"configmap" sep:"," env:"CERTDRIFT_CONFIGMAP" help:"CA-bundle ConfigMaps by name, \"name\" in every namespace (e.g. istio-ca-root-cert) or \"namespace/name\" (repeatable)."`
	KubeQPS           float32  `name:"kube-qps" default:"50" env:"CERTDRIFT_KUBE_QPS" help:"Sustained requests per second to the API server."`
	KubeBurst         int      `name:"kube-burst" default:"100" env:"CERTDRIFT_KUBE_BURST" help:"Request burst to the API server."`
	NoCertManager     bool     `name:"no-cert-manager" env:"CERTDRIFT_NO_CERT_MANAGER" help:"Do not read cert-manager's Certificates and CertificateRequests (absent CRDs need no flag: they are not an error)."`

	// InventoryOnly is for the scale benchmark (test/scale): the audit has no mode that stops
	// after the desired view, and timing the whole audit would mix the inventory with judging
	// ten thousand Secrets. Hidden: it is a measurement hook, not a feature.
	InventoryOnly bool `name:"inventory-only" hidden:"" help:"Read the Secret inventory to completion, print its size as JSON and exit."`
}

// enabled reports whether Kubernetes mode was asked for.
func (k kubeFlags) enabled() bool { return k.Kubeconfig != "" || k.InCluster }

// validateSource: a command reads local mode's config file or a cluster, and --config.check
// (check) needs the file.
func (k kubeFlags) validateSource(config string, check bool) error {
	switch {
	case config == "" && !k.enabled():
		return errors.New("one of --config (local mode) or --kubeconfig/--in-cluster (Kubernetes mode) is required")
	case check && config == "":
		return errors.New("--config.check needs --config")
	}
	return nil
}

func (k kubeFlags) validate() error {
	var errs []error
	if k.Kubeconfig != "" && k.InCluster {
		errs = append(errs, errors.New("--kubeconfig and --in-cluster are exclusive"))
	}
	if k.InCluster && k.Context != "" {
		errs = append(errs, errors.New("--context needs --kubeconfig"))
	}
	if k.SyncTimeout < 0 {
		errs = append(errs, fmt.Errorf("--sync-timeout %s: must not be negative", k.SyncTimeout))
	}
	if k.AdminIdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("--admin-idle-timeout %s: must not be negative", k.AdminIdleTimeout))
	}
	if k.AdminMaxSessions < 0 {
		errs = append(errs, fmt.Errorf("--admin-max-sessions %d: must not be negative", k.AdminMaxSessions))
	}
	if len(k.Namespace) > 0 && len(k.ExcludeNamespace) > 0 {
		errs = append(errs, errors.New("--namespace and --exclude-namespace are exclusive: name the namespaces to read, or the ones to leave out"))
	}
	for _, ns := range k.ExcludeNamespace {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--exclude-namespace %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	for _, t := range k.SecretType {
		switch {
		case t == string(corev1.SecretTypeOpaque):
			errs = append(errs, errors.New("--secret-type Opaque: Opaque Secrets hold anything; name their keys with --secret-layout instead"))
		case t == "" || strings.ContainsAny(t, ",=! \t"):
			errs = append(errs, fmt.Errorf("--secret-type %q: not a Secret type", t))
		}
	}
	for _, l := range k.SecretLayout {
		if _, err := inventory.ParseLayout(l); err != nil {
			errs = append(errs, fmt.Errorf("--secret-layout %q: %w", l, err))
		}
	}
	for flag, sel := range map[string]string{"--secret-selector": k.SecretSelector, "--configmap-selector": k.ConfigMapSelector} {
		if _, err := labels.Parse(sel); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: not a label selector: %w", flag, sel, err))
		}
	}
	if k.KubeQPS < 0 {
		errs = append(errs, fmt.Errorf("--kube-qps %v: must not be negative", k.KubeQPS))
	}
	if k.KubeBurst < 0 {
		errs = append(errs, fmt.Errorf("--kube-burst %d: must not be negative", k.KubeBurst))
	}
	if k.KubeQPS > 0 && k.KubeBurst > 0 && float32(k.KubeBurst) < k.KubeQPS {
		errs = append(errs, fmt.Errorf("--kube-burst %d is below --kube-qps %v: client-go would never reach the rate", k.KubeBurst, k.KubeQPS))
	}
	return errors.Join(errs...)
}

// restConfig is the client configuration the flags name, with the flags' rate limits.
func (k kubeFlags) restConfig() (rc *rest.Config, err error) {
	if k.InCluster {
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("--in-cluster: %w", err)
		}
	} else if rc, err = kubeapi.Kubeconfig(k.Kubeconfig, k.Context); err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = k.KubeQPS, k.KubeBurst
	return rc, nil
}

// options turns the flags into gather.KubeOptions; gather.Options are the caller's.
func (k kubeFlags) options(g gather.Options) (gather.KubeOptions, error) {
	mode, err := adminaccess.ParseMode(k.AdminAccess)
	if err != nil {
		return gather.KubeOptions{}, fmt.Errorf("--admin-access: %w", err)
	}
	presets := make([]kube.Preset, len(k.Preset))
	for i, p := range k.Preset {
		presets[i] = kube.Preset(p)
	}
	var layouts []inventory.Layout
	for _, s := range k.SecretLayout {
		l, err := inventory.ParseLayout(s)
		if err != nil {
			return gather.KubeOptions{}, fmt.Errorf("--secret-layout %q: %w", s, err)
		}
		layouts = append(layouts, l)
	}
	return gather.KubeOptions{
		Namespaces: k.Namespace, Selectors: k.Selector, Presets: presets,
		AdminMode: mode, SyncTimeout: k.SyncTimeout, Options: g,
		ExcludeNamespaces: k.ExcludeNamespace, SecretTypes: k.SecretType, Layouts: layouts,
		SecretSelector: k.SecretSelector, ConfigMapSelector: k.ConfigMapSelector, ConfigMapNames: k.ConfigMap,
		QPS: k.KubeQPS, Burst: k.KubeBurst, NoCertManager: k.NoCertManager,
		AdminIdleTimeout: k.AdminIdleTimeout, AdminMaxSessions: k.AdminMaxSessions,
	}, nil
}
