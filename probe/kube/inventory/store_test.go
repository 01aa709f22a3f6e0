package inventory

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
	"github.com/certdrift/certdrift/test/certs"
)

// TestStoreHoldsNoSecretData reads every object the informer stores hold after sync and walks
// it: no private key bytes (PEM or DER), no Secret value other than certificate DER, no
// annotations (kubectl's last-applied-configuration holds the whole Secret) and no managedFields.
func TestStoreHoldsNoSecretData(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	ns := kubetest.UniqueNS(t, "s")
	kubetest.CreateNamespaces(t, admin, ns)
	root := certs.NewCA(t)
	leaf := root.Leaf(t)
	secret := kubetest.TLSSecret(ns, "web", leaf.CertPEM, leaf.KeyPEM, root.CertPEM)
	secret.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": string(leaf.KeyPEM)}
	kubetest.CreateSecret(t, admin, secret)
	merged := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "merged"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"a.crt": leaf.CertPEM, "a.key": leaf.KeyPEM, "password": []byte("hunter2-hunter2")}}
	kubetest.CreateSecret(t, admin, merged)

	inv := startInventory(t, tb.Config, Options{Namespaces: []string{ns}, Layouts: []Layout{{Cert: "*.crt", Key: "*.key"}}})
	waitSynced(t, inv)

	keyDER, _ := pem.Decode(leaf.KeyPEM)
	forbidden := map[string][]byte{
		"private key PEM": leaf.KeyPEM,
		"private key DER": keyDER.Bytes,
		"PEM armour":      []byte("-----BEGIN"),
		"password":        []byte("hunter2-hunter2"),
	}
	objects := 0
	for _, s := range inv.sources {
		for _, obj := range s.Informer.GetStore().List() {
			objects++
			e, ok := obj.(*secretEntry)
			if !ok {
				t.Fatalf("store of %s holds a %T, want *secretEntry", s.Desc, obj)
			}
			if len(e.GetAnnotations()) > 0 || len(e.GetManagedFields()) > 0 || len(e.GetLabels()) > 0 {
				t.Errorf("%s/%s: store keeps metadata it does not need: annotations %d, managedFields %d", e.GetNamespace(), e.GetName(), len(e.GetAnnotations()), len(e.GetManagedFields()))
			}
			walkBytes(reflect.ValueOf(obj), "entry", map[uintptr]bool{}, func(path string, b []byte) {
				for what, bad := range forbidden {
					if len(bad) > 0 && bytes.Contains(b, bad) {
						t.Errorf("%s/%s: %s holds the %s", e.GetNamespace(), e.GetName(), path, what)
					}
				}
			})
			// Strings too: a summary field must never carry PEM.
			if s := fmt.Sprintf("%+v", e.Summary); bytes.Contains([]byte(s), []byte("PRIVATE KEY")) {
				t.Errorf("%s/%s: summary text contains PRIVATE KEY", e.GetNamespace(), e.GetName())
			}
		}
	}
	if objects != 2 {
		t.Errorf("stores hold %d objects, want 2 (the TLS Secret and the merged Opaque one)", objects)
	}
}

// walkBytes calls f with every byte slice and string reachable from v.
func walkBytes(v reflect.Value, path string, seen map[uintptr]bool, f func(string, []byte)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Kind() == reflect.Pointer {
			if seen[v.Pointer()] {
				return
			}
			seen[v.Pointer()] = true
		}
		walkBytes(v.Elem(), path, seen, f)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			walkBytes(v.Field(i), path+"."+v.Type().Field(i).Name, seen, f)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			f(path, v.Bytes())
			return
		}
		for i := 0; i < v.Len(); i++ {
			walkBytes(v.Index(i), fmt.Sprintf("%s[%d]", path, i), seen, f)
		}
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			walkBytes(v.Index(i), fmt.Sprintf("%s[%d]", path, i), seen, f)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			walkBytes(v.MapIndex(k), fmt.Sprintf("%s[%v]", path, k), seen, f)
		}
	case reflect.String:
		f(path, []byte(v.String()))
	}
}
