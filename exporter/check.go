package exporter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxExposition bounds what Check reads of /metrics: the 10,000-Secret exposition is 6.4 MB
// (docs/benchmarks.md), so 64 MiB is generous and still finite.
const maxExposition = 64 << 20

// Check asks a running exporter at address (HOST:PORT, plain HTTP) whether it is ready and
// exporting: /-/ready and /metrics must answer 200, and /metrics must hold a
// certdrift_build_info sample. It is `certdrift healthcheck`, for the Helm chart's `helm test`
// pod, whose scratch image has no other program to make the request.
func Check(ctx context.Context, address string, timeout time.Duration) error {
	client := &http.Client{
		Timeout: timeout,
		// A redirect would mean something other than certdrift answers.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	base := "http://" + address
	if err := get(ctx, client, base+"/-/ready", nil); err != nil {
		return err
	}
	found := false
	err := get(ctx, client, base+"/metrics", func(body io.Reader) error {
		var err error
		found, err = hasSample(body, "certdrift_build_info")
		return err
	})
	if err == nil && !found {
		err = fmt.Errorf("GET %s/metrics: no certdrift_build_info sample: not certdrift's exposition", base)
	}
	return err
}

// get requires a 200 and hands the body (bounded) to read, if given.
func get(ctx context.Context, client *http.Client, url string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d, want 200", url, resp.StatusCode)
	}
	if read == nil {
		return nil
	}
	if err := read(io.LimitReader(resp.Body, maxExposition)); err != nil {
		return fmt.Errorf("GET %s: read body: %w", url, err)
	}
	return nil
}

// hasSample reports whether the text exposition has a sample of the metric name.
func hasSample(r io.Reader, name string) (bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return false, nil
}
