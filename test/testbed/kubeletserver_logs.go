package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

const (
	// maxTailWindow is how far back from the end tailLines looks for line starts.
	maxTailWindow = 8 << 20
	logFollowPoll = 250 * time.Millisecond
	logChunk      = 32 << 10
)

// serveContainerLogs is the kubelet's /containerLogs/{namespace}/{pod}/{container}, what
// `kubectl logs` reaches through the API server. It honours follow, tailLines, limitBytes and
// previous; timestamps is ignored (the log files carry no per-line times). A followed log
// ends when the client goes away, not when the container exits: the node agent's log files
// outlive restarts.
func (s *KubeletServer) serveContainerLogs(w http.ResponseWriter, r *http.Request) {
	if s.cfg.ContainerLogPath == nil {
		http.Error(w, "container logs are not served by this node", http.StatusNotFound)
		return
	}
	if _, ok := s.lookup(w, r); !ok {
		return
	}
	q := r.URL.Query()
	follow, previous := q.Get("follow") == "true", q.Get("previous") == "true"
	tailLines, err := optionalInt(q.Get("tailLines"), 0)
	if err != nil {
		http.Error(w, "tailLines: "+err.Error(), http.StatusBadRequest)
		return
	}
	limitBytes, err := optionalInt(q.Get("limitBytes"), 1)
	if err != nil {
		http.Error(w, "limitBytes: "+err.Error(), http.StatusBadRequest)
		return
	}
	namespace, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	path, err := s.cfg.ContainerLogPath(namespace, pod, container, previous)
	if err != nil {
		// 400, as the kubelet answers for a missing previous instance: the API server passes a
		// 400's message on to the client, while a 404 becomes a bare NotFound.
		http.Error(w, fmt.Sprintf("container %q in pod %s/%s: %v", container, namespace, pod, err), http.StatusBadRequest)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, fmt.Sprintf("open log of container %q in pod %s/%s: %v", container, namespace, pod, err), http.StatusBadRequest)
		return
	}
	defer f.Close()
	if tailLines >= 0 {
		off, err := tailOffset(f, tailLines)
		if err != nil {
			http.Error(w, fmt.Sprintf("read log of container %q in pod %s/%s: %v", container, namespace, pod, err), http.StatusInternalServerError)
			return
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			http.Error(w, fmt.Sprintf("seek log of container %q in pod %s/%s: %v", container, namespace, pod, err), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	remaining := limitBytes // -1: unlimited
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, logChunk)
	for {
		chunk := buf
		if remaining >= 0 && remaining < int64(len(chunk)) {
			chunk = chunk[:remaining]
		}
		n, readErr := f.Read(chunk)
		if n > 0 {
			if _, err := w.Write(chunk[:n]); err != nil {
				return // client gone
			}
			if remaining >= 0 {
				if remaining -= int64(n); remaining == 0 {
					return
				}
			}
			if follow && flusher != nil {
				flusher.Flush()
			}
		}
		switch {
		case readErr == nil:
		case errors.Is(readErr, io.EOF) && follow:
			select {
			case <-r.Context().Done():
				return
			case <-time.After(logFollowPoll):
			}
		default:
			return
		}
	}
}

// optionalInt parses a non-negative query integer of at least min; empty gives -1.
func optionalInt(v string, min int64) (int64, error) {
	if v == "" {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < min {
		return 0, fmt.Errorf("%q is not an integer >= %d", v, min)
	}
	return n, nil
}

// tailOffset returns where the last n lines of f start, looking back at most maxTailWindow
// bytes. A final line without a newline counts as a line.
func tailOffset(f *os.File, n int64) (int64, error) {
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := info.Size()
	start := max(0, size-maxTailWindow)
	data := make([]byte, size-start)
	if _, err := f.ReadAt(data, start); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end-- // the newline ending the last line does not start another
	}
	for ; n > 0; n-- {
		i := bytes.LastIndexByte(data[:end], '\n')
		if i < 0 {
			return start, nil
		}
		end = i
	}
	if end == len(data) {
		return size, nil // tailLines=0
	}
	return start + int64(end) + 1, nil
}
