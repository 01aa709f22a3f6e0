package listwatch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	goruntime "runtime"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/kubeapi"
)

// Streaming the initial list.
//
// client-go's typed List reads a whole page into memory (io.ReadAll, growing by doubling), copies
// it once more into a runtime.Unknown, then decodes every object of the page before returning:
// for a page of 1,000 TLS Secrets that is ~9 MB alive at once, and about half of everything the
// inventory allocated while syncing 10,000 Secrets (docs/benchmarks.md). The list response is a
// protobuf runtime.Unknown whose raw bytes are the list message, whose items are length-delimited
// objects; so streamList reads the response body item by item and hands each decoded object to
// the transform at once. Only the objects being summarized are alive, and the workers summarize
// while the next ones are read.

// k8sProtobufMagic starts every protobuf-encoded Kubernetes response
// (k8s.io/apimachinery/pkg/runtime/serializer/protobuf).
var k8sProtobufMagic = []byte("k8s\x00")

// maxListItemBytes bounds one object of a list response: the API server refuses Secrets and
// ConfigMaps over 1 MiB of data, so anything near this is not a Secret.
const maxListItemBytes = 8 << 20

// errNotProtobuf says that a list response is not protobuf (a server or proxy that answered
// JSON): the caller falls back to client-go's typed List.
var errNotProtobuf = errors.New("list response is not protobuf")

// protoItem is a typed object that decodes itself from protobuf (*corev1.Secret, *corev1.ConfigMap).
type protoItem interface {
	runtime.Object
	Unmarshal([]byte) error
}

// streamPage requests one page of resource (in namespace, "" for all) and calls emit with each
// object as it is decoded. It returns the list's metadata (resourceVersion, continue token).
func StreamPage[T any, PT interface {
	*T
	protoItem
}](ctx context.Context, c rest.Interface, resource, namespace string, opts metav1.ListOptions, emit func(runtime.Object) error) (metav1.ListMeta, error) {
	body, err := c.Get().Namespace(namespace).Resource(resource).
		VersionedParams(&opts, kubeapi.ParameterCodec).
		SetHeader("Accept", protobufContentType+",application/json").
		Stream(ctx)
	if err != nil {
		return metav1.ListMeta{}, err
	}
	defer body.Close()
	return decodeListStream(body, func() protoItem { return PT(new(T)) }, emit)
}

// decodeListStream decodes a protobuf list response from r, calling emit for each item. It
// reads at most one item into memory at a time, and fails (never panics) on malformed input,
// naming where.
func decodeListStream(r io.Reader, newItem func() protoItem, emit func(runtime.Object) error) (metav1.ListMeta, error) {
	br := bufio.NewReaderSize(r, 32<<10)
	magic, err := br.Peek(len(k8sProtobufMagic))
	if err != nil || !bytes.Equal(magic, k8sProtobufMagic) {
		return metav1.ListMeta{}, errNotProtobuf
	}
	_, _ = br.Discard(len(k8sProtobufMagic))
	var (
		meta   metav1.ListMeta
		buf    bytes.Buffer
		sawRaw bool
	)
	// runtime.Unknown: 1 typeMeta, 2 raw (the list), 3 contentEncoding, 4 contentType.
	err = forEachField(br, -1, func(num int, wire byte, size int64, fr *countingReader) error {
		if num != 2 || wire != wireBytes {
			return skipField(fr, wire, size)
		}
		if sawRaw {
			return errors.New("two list bodies in one response")
		}
		sawRaw = true
		// The list: 1 metadata (ListMeta), 2 items (each one object).
		return forEachField(fr, size, func(num int, wire byte, size int64, ir *countingReader) error {
			if wire != wireBytes || (num != 1 && num != 2) {
				return skipField(ir, wire, size)
			}
			if size > maxListItemBytes {
				return fmt.Errorf("list item of %d bytes exceeds the limit of %d", size, maxListItemBytes)
			}
			// Grown as bytes arrive, not to the declared size: a short body claiming a huge
			// item costs what it sent.
			buf.Reset()
			if _, err := buf.ReadFrom(io.LimitReader(ir, size)); err != nil {
				return fmt.Errorf("read list item: %w", err)
			}
			if int64(buf.Len()) != size {
				return fmt.Errorf("read list item: %w", io.ErrUnexpectedEOF)
			}
			b := buf.Bytes()
			if num == 1 {
				if err := meta.Unmarshal(b); err != nil {
					return fmt.Errorf("decode list metadata: %w", err)
				}
				return nil
			}
			// Unmarshal copies every string and byte slice out of b, so b can be reused.
			obj := newItem()
			if err := obj.Unmarshal(b); err != nil {
				return fmt.Errorf("decode list item: %w", err)
			}
			return emit(obj)
		})
	})
	if err != nil {
		return metav1.ListMeta{}, err
	}
	if !sawRaw {
		return metav1.ListMeta{}, errors.New("protobuf list response without a body")
	}
	return meta, nil
}

// Protobuf wire types this decoder meets.
const (
	wireVarint = 0
	wireI64    = 1
	wireBytes  = 2
	wireI32    = 5
)

// countingReader reads from a bufio.Reader and counts the bytes read, so that nested messages
// can stop at their declared length.
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// forEachField reads the fields of one message of length limit (-1: until EOF) and calls f with
// each field's number, wire type and, for length-delimited fields, length. f must consume
// exactly the field's value from the reader it is given.
func forEachField(r io.Reader, limit int64, f func(num int, wire byte, size int64, r *countingReader) error) error {
	var cr *countingReader
	switch r := r.(type) {
	case *bufio.Reader:
		cr = &countingReader{r: r}
	case *countingReader:
		cr = &countingReader{r: r.r}
		defer func() { r.n += cr.n }()
	default:
		return errors.New("forEachField needs a buffered reader")
	}
	for limit < 0 || cr.n < limit {
		tag, err := binary.ReadUvarint(cr)
		if err != nil {
			if limit < 0 && err == io.EOF { // the end of the response, between fields
				return nil
			}
			return fmt.Errorf("read field tag at byte %d: %w", cr.n, noEOF(err))
		}
		num, wire := int(tag>>3), byte(tag&7)
		if num == 0 {
			return fmt.Errorf("field number 0 at byte %d", cr.n)
		}
		var size int64
		if wire == wireBytes {
			l, err := binary.ReadUvarint(cr)
			if err != nil {
				return fmt.Errorf("read field %d length: %w", num, noEOF(err))
			}
			if l > 1<<40 || (limit >= 0 && int64(l) > limit-cr.n) {
				return fmt.Errorf("field %d of %d bytes overruns its message", num, l)
			}
			size = int64(l)
		}
		start := cr.n
		if err := f(num, wire, size, cr); err != nil {
			return err
		}
		if wire == wireBytes && cr.n-start != size {
			return fmt.Errorf("field %d: read %d of %d bytes", num, cr.n-start, size)
		}
	}
	if limit >= 0 && cr.n != limit {
		return fmt.Errorf("message overruns its length (%d > %d)", cr.n, limit)
	}
	return nil
}

// skipField discards one field value.
func skipField(r *countingReader, wire byte, size int64) error {
	var err error
	switch wire {
	case wireVarint:
		_, err = binary.ReadUvarint(r)
	case wireI64:
		_, err = io.CopyN(io.Discard, r, 8)
	case wireI32:
		_, err = io.CopyN(io.Discard, r, 4)
	case wireBytes:
		_, err = io.CopyN(io.Discard, r, size)
	default:
		return fmt.Errorf("unsupported protobuf wire type %d", wire)
	}
	if err != nil {
		return fmt.Errorf("skip field: %w", noEOF(err))
	}
	return nil
}

// noEOF turns a clean EOF inside a message into ErrUnexpectedEOF: the response was cut short.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// transformStream runs produce, which emits the objects of one page as it decodes them, and
// summarizes them with up to GOMAXPROCS workers (at most 4) while it reads on: parsing keys and
// certificates is nearly all of the inventory's CPU (docs/benchmarks.md). Results keep the
// page's order. At most a few decoded objects wait for a worker at any time.
func transformStream(produce func(emit func(runtime.Object) error) (metav1.ListMeta, error), transform func(any) (any, error)) ([]runtime.Object, metav1.ListMeta, error) {
	workers := min(goruntime.GOMAXPROCS(0), 4)
	type job struct {
		i   int
		obj runtime.Object
	}
	jobs := make(chan job, workers)
	stop := make(chan struct{})
	var (
		mu      sync.Mutex
		out     []runtime.Object
		first   error
		wg      sync.WaitGroup
		stopped sync.Once
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		stopped.Do(func() { close(stop) })
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				e, err := transform(j.obj)
				if err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				out[j.i] = e.(runtime.Object)
				mu.Unlock()
			}
		}()
	}
	n := 0
	meta, err := produce(func(obj runtime.Object) error {
		mu.Lock()
		out = append(out, nil)
		mu.Unlock()
		select {
		case jobs <- job{n, obj}:
			n++
			return nil
		case <-stop:
			return errTransformStopped
		}
	})
	close(jobs)
	wg.Wait()
	if first != nil {
		return nil, metav1.ListMeta{}, first
	}
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	return out, meta, nil
}

var errTransformStopped = errors.New("transform failed")
