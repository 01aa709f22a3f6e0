package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// healthcheckCmd asks a running `certdrift serve` whether it is ready and exporting. It exists
// for the Helm chart's `helm test` pod: the image is scratch (no shell, no curl), so the only
// program that can make the request is certdrift itself. Plain HTTP only: a metrics port behind
// a web config (TLS, basic auth) is checked by Prometheus, not by this.
type healthcheckCmd struct {
	Address string        `arg:"" placeholder:"HOST:PORT" help:"Address of certdrift serve's metrics port."`
	Timeout time.Duration `default:"10s" help:"Deadline of each request."`
}

// maxExposition bounds what is read of /metrics: the 10,000-Secret exposition is 6.4 MB
// (docs/benchmarks.md), so 64 MiB is generous and still finite.
const maxExposition = 64 << 20

func (c *healthcheckCmd) Run(ctx context.Context, out *streams, _ *slog.Logger) error {
	if _, _, err := net.SplitHostPort(c.Address); err != nil {
		return noRun(fmt.Errorf("address %q: want HOST:PORT: %w", c.Address, err))
	}
	client := &http.Client{
		Timeout: c.Timeout,
		// A redirect would mean something other than certdrift answers.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	base := "http://" + c.Address
	if err := c.get(ctx, client, base+"/-/ready", nil); err != nil {
		return &exitError{code: exitFindings, err: err}
	}
	found := false
	err := c.get(ctx, client, base+"/metrics", func(body io.Reader) error {
		var err error
		found, err = hasSample(body, "certdrift_build_info")
		return err
	})
	if err == nil && !found {
		err = fmt.Errorf("GET %s/metrics: no certdrift_build_info sample: not certdrift's exposition", base)
	}
	if err != nil {
		return &exitError{code: exitFindings, err: err}
	}
	_, err = fmt.Fprintf(out.Out, "ok: %s/-/ready and /metrics (certdrift_build_info present)\n", base)
	return err
}

// get requires a 200 and hands the body (bounded) to read, if given.
func (c *healthcheckCmd) get(ctx context.Context, client *http.Client, url string, read func(io.Reader) error) error {
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
