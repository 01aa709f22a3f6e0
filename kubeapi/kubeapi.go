// Package kubeapi is the subset of the Kubernetes API certdrift calls, typed, without client-go's
// generated clientset.
//
// Why not k8s.io/client-go/kubernetes: its scheme package registers every built-in API group
// version (≈56 of them) at init, and each k8s.io/api package it imports builds its swagger-doc
// maps at init too. Those init functions touch ≈10.7 MB of the binary's pages in every certdrift
// process before it does anything (25.1 MB peak RSS for a binary that only imports the clientset,
// 14.4 MB for one importing client-go's rest and gentype with the four API groups below), against a
// 50 MB budget for a whole 10,000-Secret inventory (issue 4). client-go's tools/leaderelection
// pulls the whole scheme in as well (it imports informers and typed clients), which is why
// remediate has its own Lease elector on this package.
//
// What stays client-go's code: the REST client (rate limits, retries, auth, timeouts, all from
// the caller's *rest.Config) and its request builder, on which Resource's verbs are one call
// chain each (Resource says why not k8s.io/client-go/gentype). This package only chooses the
// groups, the scheme and the codecs, and gives them the clientset's shape
// (c.CoreV1().Pods(ns).Get(...)) so call sites read the same.
//
// Kubeconfig reads the client configuration a kubeconfig file names, the file bounded first.
//
// Add a resource here only when a call site needs it; a group added costs its k8s.io/api
// package's init in every process.
package kubeapi

import (
	"fmt"
	"net/http"

	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

var (
	// scheme knows only the groups certdrift calls (and meta/v1's options and Status).
	scheme = runtime.NewScheme()
	// codecs offers JSON, YAML and protobuf for the scheme's types; the typed clients ask for
	// protobuf first (gentype.PrefersProtobuf), as client-go's generated clients do for built-in
	// types, and accept JSON from a server or proxy that answers with it.
	codecs = serializer.NewCodecFactory(scheme)
	// ParameterCodec encodes ListOptions, GetOptions and the like into query parameters, for
	// requests built directly on a group's RESTClient.
	ParameterCodec = runtime.NewParameterCodec(scheme)
)

func init() {
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(appsv1.AddToScheme(scheme))
	utilruntime.Must(coordv1.AddToScheme(scheme))
}

// Client is a typed client for the API groups certdrift uses. Safe for concurrent use.
type Client struct {
	core  *CoreV1
	apps  *AppsV1
	coord *CoordinationV1
}

// NewForConfig builds a Client from cfg, which it does not modify. As client-go's clientset
// does, every group shares one HTTP client (one connection pool) and, when cfg sets QPS but no
// RateLimiter, one token bucket, so QPS and Burst bound the whole client, not each group.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	if cfg == nil {
		return nil, fmt.Errorf("kubeapi: no client configuration")
	}
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("kubeapi: client for %s: burst must be above 0 when QPS (%g) is set", c.Host, c.QPS)
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	httpClient, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: HTTP client for %s: %w", c.Host, err)
	}
	core, err := groupClient(&c, httpClient, corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	apps, err := groupClient(&c, httpClient, appsv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	coord, err := groupClient(&c, httpClient, coordv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	return &Client{core: &CoreV1{core}, apps: &AppsV1{apps}, coord: &CoordinationV1{coord}}, nil
}

// groupClient is one group version's REST client on the shared HTTP client.
func groupClient(cfg *rest.Config, h *http.Client, gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
	c := *cfg
	c.GroupVersion = &gv
	c.APIPath = apiPath
	c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(scheme, codecs).WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(&c, h)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: %s client for %s: %w", gv, cfg.Host, err)
	}
	return rc, nil
}

// CoreV1 is the core/v1 group.
func (c *Client) CoreV1() *CoreV1 { return c.core }

// AppsV1 is the apps/v1 group.
func (c *Client) AppsV1() *AppsV1 { return c.apps }

// CoordinationV1 is the coordination.k8s.io/v1 group.
func (c *Client) CoordinationV1() *CoordinationV1 { return c.coord }

// CoreV1 is the core/v1 group's resources that certdrift uses.
type CoreV1 struct{ rest rest.Interface }

// RESTClient is the group's REST client, for subresources the typed verbs do not cover
// (eviction, port-forward) and for streaming a list.
func (g *CoreV1) RESTClient() rest.Interface { return g.rest }

// Pods in namespace.
func (g *CoreV1) Pods(namespace string) *Resource[*corev1.Pod, *corev1.PodList] {
	return resource(g.rest, "pods", namespace, func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} })
}

// Secrets in namespace.
func (g *CoreV1) Secrets(namespace string) *Resource[*corev1.Secret, *corev1.SecretList] {
	return resource(g.rest, "secrets", namespace, func() *corev1.Secret { return &corev1.Secret{} }, func() *corev1.SecretList { return &corev1.SecretList{} })
}

// ConfigMaps in namespace.
func (g *CoreV1) ConfigMaps(namespace string) *Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return resource(g.rest, "configmaps", namespace, func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}

// Events in namespace (core/v1, which `kubectl describe` shows).
func (g *CoreV1) Events(namespace string) *Resource[*corev1.Event, *corev1.EventList] {
	return resource(g.rest, "events", namespace, func() *corev1.Event { return &corev1.Event{} }, func() *corev1.EventList { return &corev1.EventList{} })
}

// AppsV1 is the apps/v1 group's resources that certdrift uses.
type AppsV1 struct{ rest rest.Interface }

// RESTClient is the group's REST client.
func (g *AppsV1) RESTClient() rest.Interface { return g.rest }

// Deployments in namespace.
func (g *AppsV1) Deployments(namespace string) *Resource[*appsv1.Deployment, *appsv1.DeploymentList] {
	return resource(g.rest, "deployments", namespace, func() *appsv1.Deployment { return &appsv1.Deployment{} }, func() *appsv1.DeploymentList { return &appsv1.DeploymentList{} })
}

// DaemonSets in namespace.
func (g *AppsV1) DaemonSets(namespace string) *Resource[*appsv1.DaemonSet, *appsv1.DaemonSetList] {
	return resource(g.rest, "daemonsets", namespace, func() *appsv1.DaemonSet { return &appsv1.DaemonSet{} }, func() *appsv1.DaemonSetList { return &appsv1.DaemonSetList{} })
}

// StatefulSets in namespace.
func (g *AppsV1) StatefulSets(namespace string) *Resource[*appsv1.StatefulSet, *appsv1.StatefulSetList] {
	return resource(g.rest, "statefulsets", namespace, func() *appsv1.StatefulSet { return &appsv1.StatefulSet{} }, func() *appsv1.StatefulSetList { return &appsv1.StatefulSetList{} })
}

// ReplicaSets in namespace.
func (g *AppsV1) ReplicaSets(namespace string) *Resource[*appsv1.ReplicaSet, *appsv1.ReplicaSetList] {
	return resource(g.rest, "replicasets", namespace, func() *appsv1.ReplicaSet { return &appsv1.ReplicaSet{} }, func() *appsv1.ReplicaSetList { return &appsv1.ReplicaSetList{} })
}

// CoordinationV1 is the coordination.k8s.io/v1 group's resources that certdrift uses.
type CoordinationV1 struct{ rest rest.Interface }

// RESTClient is the group's REST client.
func (g *CoordinationV1) RESTClient() rest.Interface { return g.rest }

// Leases in namespace: leader election and the per-workload repair cooldown.
func (g *CoordinationV1) Leases(namespace string) *Resource[*coordv1.Lease, *coordv1.LeaseList] {
	return resource(g.rest, "leases", namespace, func() *coordv1.Lease { return &coordv1.Lease{} }, func() *coordv1.LeaseList { return &coordv1.LeaseList{} })
}
