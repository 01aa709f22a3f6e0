package listwatch

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// encodeList encodes list as the API server does for a protobuf list response.
func encodeList(t testing.TB, list runtime.Object) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), protobufContentType)
	if !ok {
		t.Fatal("no protobuf serializer in client-go's scheme")
	}
	b, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion), list)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func secretList(n int) *corev1.SecretList {
	l := &corev1.SecretList{ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "next-page"}}
	for i := range n {
		l.Items = append(l.Items, corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%d", i), UID: types.UID(fmt.Sprint("uid-", i)), ResourceVersion: fmt.Sprint(i + 1),
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", Operation: "Update", FieldsV1: metav1.NewFieldsV1(`{"f:data":{}}`)}}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": bytes.Repeat([]byte{byte(i)}, 100+i), "tls.key": []byte("k")},
		})
	}
	return l
}

// decodeAll decodes body and returns the Secrets it emitted.
func decodeAll(body []byte) ([]corev1.Secret, metav1.ListMeta, error) {
	var got []corev1.Secret
	meta, err := decodeListStream(bytes.NewReader(body), func() protoItem { return &corev1.Secret{} }, func(o runtime.Object) error {
		got = append(got, *o.(*corev1.Secret))
		return nil
	})
	return got, meta, err
}

func TestDecodeListStream(t *testing.T) {
	full := secretList(3)
	cases := map[string]struct {
		reason   string
		body     []byte
		want     []corev1.Secret
		wantMeta metav1.ListMeta
		wantErr  string // substring; "" for success
		notProto bool
	}{
		"ThreeSecrets": {
			reason:   "every item is decoded, in order, with the list's resourceVersion and continue token",
			body:     encodeList(t, full),
			want:     full.Items,
			wantMeta: full.ListMeta,
		},
		"Empty": {
			reason:   "an empty page has metadata and no items",
			body:     encodeList(t, &corev1.SecretList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}),
			wantMeta: metav1.ListMeta{ResourceVersion: "7"},
		},
		"JSON": {
			reason:   "a JSON answer is not decoded here: the caller falls back to the typed List",
			body:     []byte(`{"kind":"SecretList","items":[]}`),
			notProto: true,
		},
		"NoBody": {
			reason:  "the magic alone is not a list",
			body:    []byte("k8s\x00"),
			wantErr: "without a body",
		},
		"HugeItem": {
			reason: "an item longer than its list is refused before anything is read",
			// Unknown field 2 (raw) of 6 bytes: list field 2 (item) claiming 64 MiB.
			body:    append([]byte("k8s\x00\x12\x06"), 0x12, 0x80, 0x80, 0x80, 0x20, 0x00),
			wantErr: "overruns its message",
		},
		"HugeItemInLongList": {
			reason:  "an item may not exceed maxListItemBytes even when the list says it is that long",
			body:    append(append([]byte("k8s\x00\x12"), uvarint(maxListItemBytes+10)...), append([]byte{0x12}, uvarint(maxListItemBytes+1)...)...),
			wantErr: "exceeds the limit",
		},
		"BadWireType": {
			reason:  "a wire type protobuf does not use for these messages is an error, not a skip into garbage",
			body:    []byte("k8s\x00\x0f"),
			wantErr: "wire type",
		},
		"FieldZero": {
			reason:  "field number 0 does not exist",
			body:    []byte("k8s\x00\x02\x00"),
			wantErr: "field number 0",
		},
		"ItemNotASecret": {
			reason:  "bytes that do not decode as a Secret name the item",
			body:    []byte("k8s\x00\x12\x04\x12\x02\xff\xff"),
			wantErr: "decode list item",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, meta, err := decodeAll(tc.body)
			if tc.notProto {
				if !errors.Is(err, errNotProtobuf) {
					t.Fatalf("%s\nerr = %v, want errNotProtobuf", tc.reason, err)
				}
				return
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s\nerr = %v, want one containing %q", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s\nerr = %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nitems (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantMeta, meta); diff != "" {
				t.Errorf("%s\nlist metadata (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func uvarint(v uint64) []byte {
	var b []byte
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// TestDecodeListStreamTruncated cuts a response at every byte: each cut is an error or (when it
// falls between the envelope's trailing fields) the whole list, never a partial list reported as
// complete, and never a panic.
func TestDecodeListStreamTruncated(t *testing.T) {
	list := secretList(3)
	body := encodeList(t, list)
	for n := len(k8sProtobufMagic); n < len(body); n++ {
		got, _, err := decodeAll(body[:n])
		if err == nil && len(got) != len(list.Items) {
			t.Fatalf("cut at %d of %d bytes: no error and %d of %d items", n, len(body), len(got), len(list.Items))
		}
	}
}

func TestTransformStream(t *testing.T) {
	produce := func(n int) func(func(runtime.Object) error) (metav1.ListMeta, error) {
		return func(emit func(runtime.Object) error) (metav1.ListMeta, error) {
			for i := range n {
				if err := emit(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint(i)}}); err != nil {
					return metav1.ListMeta{}, err
				}
			}
			return metav1.ListMeta{ResourceVersion: "9"}, nil
		}
	}
	name := func(o any) (any, error) {
		s := o.(*corev1.Secret)
		if s.Name == "fail" {
			return nil, errors.New("boom")
		}
		// A ConfigMap stands for the summary entry the inventory would return.
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.Name}}, nil
	}
	t.Run("Order", func(t *testing.T) {
		out, meta, err := transformStream(produce(50), name)
		if err != nil || meta.ResourceVersion != "9" {
			t.Fatalf("err %v, meta %+v", err, meta)
		}
		var got, want []string
		for i, o := range out {
			got = append(got, o.(*corev1.ConfigMap).Name)
			want = append(want, fmt.Sprint(i))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("summaries out of page order (-want +got):\n%s", diff)
		}
	})
	t.Run("TransformError", func(t *testing.T) {
		_, _, err := transformStream(func(emit func(runtime.Object) error) (metav1.ListMeta, error) {
			for i := range 1000 {
				n := fmt.Sprint(i)
				if i == 3 {
					n = "fail"
				}
				if err := emit(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
					return metav1.ListMeta{}, err
				}
			}
			return metav1.ListMeta{}, nil
		}, name)
		if err == nil || err.Error() != "boom" {
			t.Errorf("err = %v, want the transform's error", err)
		}
	})
	t.Run("ProduceError", func(t *testing.T) {
		_, _, err := transformStream(func(emit func(runtime.Object) error) (metav1.ListMeta, error) {
			return metav1.ListMeta{}, errors.New("cut")
		}, name)
		if err == nil || err.Error() != "cut" {
			t.Errorf("err = %v, want the producer's error", err)
		}
	})
}

// FuzzDecodeListStream: any response body gives items or an error, never a panic, and never
// more items than the body has bytes.
func FuzzDecodeListStream(f *testing.F) {
	f.Add(encodeList(f, secretList(2)))
	f.Add(encodeList(f, &corev1.SecretList{}))
	f.Add([]byte("k8s\x00\x12\x04\x12\x02\xff\xff"))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, _, err := decodeAll(body)
		if err == nil && len(got) > len(body) {
			t.Fatalf("%d items from %d bytes", len(got), len(body))
		}
	})
}
