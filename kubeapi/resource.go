package kubeapi

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Resource is the typed client of one resource in one namespace ("" for all namespaces): the
// clientset's verbs that certdrift and its tests call, on client-go's REST request builder.
//
// Why not k8s.io/client-go/gentype, which the generated clientset is made of: that package also
// holds the clientset's fakes, which link client-go/testing and, through it, server-side apply's
// field management, strategic merge patch, kube-openapi and two OpenAPI models (gnostic) into
// every certdrift binary: 3.1 MB of the stripped binary that no certdrift process calls, and
// ≈ 3.6 MB of every process's RSS, as the kernel maps pages in around the code it does call
// (docs/benchmarks.md, "issue 20, round 3").
type Resource[T object, L runtime.Object] struct {
	rest      rest.Interface
	name      string // the resource, e.g. "pods"
	namespace string
	newObj    func() T
	newList   func() L
}

// object is what the groups here serve: an API object with metadata.
type object interface {
	runtime.Object
	metav1.Object
}

func resource[T object, L runtime.Object](rc rest.Interface, name, namespace string, newObj func() T, newList func() L) *Resource[T, L] {
	return &Resource[T, L]{rest: rc, name: name, namespace: namespace, newObj: newObj, newList: newList}
}

// on starts a request for the resource in the client's namespace, asking for protobuf first as
// client-go's generated clients do for built-in types (a server or proxy that answers JSON is
// understood too).
func (r *Resource[T, L]) on(req *rest.Request) *rest.Request {
	return req.UseProtobufAsDefault().NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name)
}

// timeoutOf is a list or watch's server-side timeout as a client-side one too.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// Get reads one object by name.
func (r *Resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := r.newObj()
	err := r.on(r.rest.Get()).Name(name).VersionedParams(&opts, ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// List reads the objects opts select.
func (r *Resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := r.newList()
	err := r.on(r.rest.Get()).VersionedParams(&opts, ParameterCodec).Timeout(timeoutOf(opts)).Do(ctx).Into(out)
	return out, err
}

// Watch streams the changes of the objects opts select.
func (r *Resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.on(r.rest.Get()).VersionedParams(&opts, ParameterCodec).Timeout(timeoutOf(opts)).Watch(ctx)
}

// Create creates obj and returns the server's copy.
func (r *Resource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := r.newObj()
	err := r.on(r.rest.Post()).VersionedParams(&opts, ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Update replaces obj (named by its metadata) and returns the server's copy.
func (r *Resource[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return r.put(ctx, obj, opts)
}

// UpdateStatus replaces obj's status subresource and returns the server's copy.
func (r *Resource[T, L]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return r.put(ctx, obj, opts, "status")
}

func (r *Resource[T, L]) put(ctx context.Context, obj T, opts metav1.UpdateOptions, subresource ...string) (T, error) {
	out := r.newObj()
	err := r.on(r.rest.Put()).Name(obj.GetName()).SubResource(subresource...).VersionedParams(&opts, ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Delete deletes the object name.
func (r *Resource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.on(r.rest.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

// Patch applies a patch of type pt to the object name (or to its subresource) and returns the
// server's copy.
func (r *Resource[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out := r.newObj()
	err := r.on(r.rest.Patch(pt)).Name(name).SubResource(subresources...).VersionedParams(&opts, ParameterCodec).Body(data).Do(ctx).Into(out)
	return out, err
}
