package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/certdrift/certdrift/test/atomicdir"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Volumes live in <pod dir>/volumes/<volume name>. Secret, ConfigMap, projected and
// downwardAPI volumes are written with atomicdir, the kubelet's atomic-writer layout, on every
// sync (atomicdir.Write does nothing when the payload is unchanged); emptyDir and every other
// type become an empty directory. File modes (defaultMode, items[].mode) are not applied: every
// file is 0644, which is what Envoy and certdrift can observe anyway.

// cachedToken is a service-account token and when to request a new one: at 80% of its
// lifetime, the kubelet's rule.
type cachedToken struct {
	token   []byte
	refresh time.Time
}

func (w *podWorker) volumeDir(name string) string { return filepath.Join(w.dir, "volumes", name) }

func (w *podWorker) projectVolumes(ctx context.Context, pod *corev1.Pod) error {
	var errs []error
	for _, v := range pod.Spec.Volumes {
		payload, err := w.volumePayload(ctx, pod, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", v.Name, err))
			continue
		}
		dir := w.volumeDir(v.Name)
		if len(payload) == 0 {
			// emptyDir, unsupported types, and an optional source that does not exist.
			if err := os.MkdirAll(dir, 0o755); err != nil {
				errs = append(errs, fmt.Errorf("volume %q: %w", v.Name, err))
			}
			continue
		}
		if err := atomicdir.Write(dir, payload); err != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", v.Name, err))
		}
	}
	return errors.Join(errs...)
}

// volumePayload returns the files of one volume; nil for volumes that are plain directories.
func (w *podWorker) volumePayload(ctx context.Context, pod *corev1.Pod, v corev1.Volume) (map[string][]byte, error) {
	switch {
	case v.Secret != nil:
		return w.secretFiles(ctx, v.Secret.SecretName, v.Secret.Items, ptrTrue(v.Secret.Optional))
	case v.ConfigMap != nil:
		return w.configMapFiles(ctx, v.ConfigMap.Name, v.ConfigMap.Items, ptrTrue(v.ConfigMap.Optional))
	case v.DownwardAPI != nil:
		return downwardFiles(pod, w, v.DownwardAPI.Items)
	case v.Projected != nil:
		out := map[string][]byte{}
		for i, src := range v.Projected.Sources {
			files, err := w.projectedSource(ctx, pod, v.Name, i, src)
			if err != nil {
				return nil, err
			}
			maps.Copy(out, files)
		}
		return out, nil
	case v.EmptyDir != nil:
		return nil, nil
	default:
		if !w.warnedVolume[v.Name] {
			w.warnedVolume[v.Name] = true
			w.log.Warn("volume type not supported by the testbed, mounting an empty directory", "volume", v.Name)
		}
		return nil, nil
	}
}

func (w *podWorker) projectedSource(ctx context.Context, pod *corev1.Pod, volume string, i int, src corev1.VolumeProjection) (map[string][]byte, error) {
	switch {
	case src.Secret != nil:
		return w.secretFiles(ctx, src.Secret.Name, src.Secret.Items, ptrTrue(src.Secret.Optional))
	case src.ConfigMap != nil:
		return w.configMapFiles(ctx, src.ConfigMap.Name, src.ConfigMap.Items, ptrTrue(src.ConfigMap.Optional))
	case src.DownwardAPI != nil:
		return downwardFiles(pod, w, src.DownwardAPI.Items)
	case src.ServiceAccountToken != nil:
		tok, err := w.serviceAccountToken(ctx, pod, fmt.Sprintf("%s/%d", volume, i), src.ServiceAccountToken)
		if err != nil {
			return nil, err
		}
		return map[string][]byte{src.ServiceAccountToken.Path: tok}, nil
	default: // clusterTrustBundle, podCertificate: not used by anything the testbed runs
		key := fmt.Sprintf("%s/%d", volume, i)
		if !w.warnedVolume[key] {
			w.warnedVolume[key] = true
			w.log.Warn("projected source type not supported by the testbed, skipped", "volume", volume, "source", i)
		}
		return nil, nil
	}
}

func ptrTrue(b *bool) bool { return b != nil && *b }

func (w *podWorker) secretFiles(ctx context.Context, name string, items []corev1.KeyToPath, optional bool) (map[string][]byte, error) {
	return secretVolumeFiles(ctx, w.node.client, w.namespace, name, items, optional)
}

// secretVolumeFiles is the payload of a Secret volume: what the node agent projects into pods
// and what the testbed projects for the control planes it runs as host processes
// (hostvolume.go).
func secretVolumeFiles(ctx context.Context, client kubernetes.Interface, namespace, name string, items []corev1.KeyToPath, optional bool) (map[string][]byte, error) {
	s, err := client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Secret %s/%s: %w", namespace, name, err)
	}
	return selectItems("Secret", name, s.Data, items, optional)
}

func (w *podWorker) configMapFiles(ctx context.Context, name string, items []corev1.KeyToPath, optional bool) (map[string][]byte, error) {
	cm, err := w.node.client.CoreV1().ConfigMaps(w.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get ConfigMap %s/%s: %w", w.namespace, name, err)
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	maps.Copy(data, cm.BinaryData)
	return selectItems("ConfigMap", name, data, items, optional)
}

// selectItems applies a volume's items (key → path). Without items every key is a file named
// after it. A missing key fails the volume, as in the kubelet, unless the source is optional.
func selectItems(kind, name string, data map[string][]byte, items []corev1.KeyToPath, optional bool) (map[string][]byte, error) {
	if len(items) == 0 {
		return maps.Clone(data), nil
	}
	out := make(map[string][]byte, len(items))
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%s %s has no key %q named in items", kind, name, it.Key)
		}
		out[it.Path] = v
	}
	return out, nil
}

// serviceAccountToken asks the TokenRequest API for a token bound to the pod, as the kubelet
// does with its node credentials (the Node authorizer allows it only for pods on this node).
// The token is never logged.
func (w *podWorker) serviceAccountToken(ctx context.Context, pod *corev1.Pod, key string, src *corev1.ServiceAccountTokenProjection) ([]byte, error) {
	if t, ok := w.tokens[key]; ok && time.Now().Before(t.refresh) {
		return t.token, nil
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ttl := int64(3600)
	if src.ExpirationSeconds != nil {
		ttl = *src.ExpirationSeconds
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &ttl,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	resp, err := w.node.client.CoreV1().ServiceAccounts(w.namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request a token for ServiceAccount %s/%s: %w", w.namespace, sa, err)
	}
	lifetime := time.Until(resp.Status.ExpirationTimestamp.Time)
	t := cachedToken{token: []byte(resp.Status.Token), refresh: time.Now().Add(lifetime * 8 / 10)}
	w.tokens[key] = t
	return t.token, nil
}

// downwardFiles renders the downward API fields the testbed knows; resourceFieldRef items and
// unknown fields are skipped.
func downwardFiles(pod *corev1.Pod, w *podWorker, items []corev1.DownwardAPIVolumeFile) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, it := range items {
		if it.FieldRef == nil {
			continue
		}
		v, ok := podField(pod, w, it.FieldRef.FieldPath)
		if !ok {
			continue
		}
		out[it.Path] = []byte(v)
	}
	return out, nil
}

// podField resolves a fieldRef path (downward API volumes and env).
func podField(pod *corev1.Pod, w *podWorker, path string) (string, bool) {
	switch path {
	case "metadata.name":
		return pod.Name, true
	case "metadata.namespace":
		return pod.Namespace, true
	case "metadata.uid":
		return string(pod.UID), true
	case "metadata.labels":
		return formatMap(pod.Labels), true
	case "metadata.annotations":
		return formatMap(pod.Annotations), true
	case "spec.nodeName":
		return pod.Spec.NodeName, true
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, true
	case "status.podIP":
		return w.podIP.String(), true
	case "status.hostIP":
		return w.node.HostIP.String(), true
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels['": pod.Labels, "metadata.annotations['": pod.Annotations} {
		if strings.HasPrefix(path, prefix) && strings.HasSuffix(path, "']") {
			v, ok := m[strings.TrimSuffix(strings.TrimPrefix(path, prefix), "']")]
			return v, ok
		}
	}
	return "", false
}

// formatMap is the downward API's rendering of labels and annotations: key="value" lines,
// sorted by key.
func formatMap(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return b.String()
}

// maxSubPathCopy bounds what one subPath mount may copy.
const maxSubPathCopy = 64 << 20

// copySubPath materialises a subPath mount: the file or directory at subPath inside the volume
// is copied to dst when the container starts and never touched again, which is what a subPath
// bind mount of a kubelet-managed volume amounts to (it pins the inode of the version current at
// container start: kubernetes/kubernetes#50345). A subPath that does not exist becomes an empty
// directory, as the kubelet creates it.
func copySubPath(volDir, subPath, dst string) error {
	if subPath == "" || filepath.IsAbs(subPath) || slices.Contains(strings.Split(subPath, "/"), "..") {
		return fmt.Errorf("subPath %q must be a relative path without '..'", subPath)
	}
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("subPath %q: clear %s: %w", subPath, dst, err)
	}
	src := filepath.Join(volDir, subPath)
	fi, err := os.Stat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return os.MkdirAll(dst, 0o755)
	}
	if err != nil {
		return fmt.Errorf("subPath %q: %w", subPath, err)
	}
	budget := int64(maxSubPathCopy)
	if !fi.IsDir() {
		return copyFile(src, dst, &budget)
	}
	// Resolve the directory once (through ..data), then copy what it holds.
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return fmt.Errorf("subPath %q: %w", subPath, err)
	}
	return filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(real, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return copyFile(p, target, &budget)
	})
}

func copyFile(src, dst string, budget *int64) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, atomicdir.FileMode)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	n, err := io.Copy(out, io.LimitReader(in, *budget+1))
	*budget -= n
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && *budget < 0 {
		err = fmt.Errorf("more than %d bytes", maxSubPathCopy)
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}
