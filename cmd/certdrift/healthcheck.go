package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/certdrift/certdrift/exporter"
)

// healthcheckCmd asks a running `certdrift serve` whether it is ready and exporting. It exists
// for the Helm chart's `helm test` pod: the image is scratch (no shell, no curl), so the only
// program that can make the request is certdrift itself. Plain HTTP only: a metrics port behind
// a web config (TLS, basic auth) is checked by Prometheus, not by this.
type healthcheckCmd struct {
	Address string        `arg:"" placeholder:"HOST:PORT" help:"Address of certdrift serve's metrics port."`
	Timeout time.Duration `default:"10s" help:"Deadline of each request."`
}

func (c *healthcheckCmd) Run(ctx context.Context, out *streams, _ *slog.Logger) error {
	if _, _, err := net.SplitHostPort(c.Address); err != nil {
		return noRun(fmt.Errorf("address %q: want HOST:PORT: %w", c.Address, err))
	}
	if err := exporter.Check(ctx, c.Address, c.Timeout); err != nil {
		return &exitError{code: exitFindings, err: err}
	}
	_, err := fmt.Fprintf(out.Out, "ok: http://%s/-/ready and /metrics (certdrift_build_info present)\n", c.Address)
	return err
}
