package remediate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// AdminQuitEnvoy asks an Envoy to stop serving and exit through its admin API:
// POST /drain_listeners?graceful lets connections finish, then after drainWait
// POST /quitquitquit ends the process. A supervisor (the kubelet, systemd, a loop) must restart
// it; the restarted Envoy reads its certificate files anew.
func AdminQuitEnvoy(ctx context.Context, hc *http.Client, baseURL string, drainWait time.Duration) error {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	base := strings.TrimRight(baseURL, "/")
	if err := adminPost(ctx, hc, base+"/drain_listeners?graceful"); err != nil {
		return err
	}
	if err := sleepCtx(ctx, drainWait); err != nil {
		return fmt.Errorf("drain %s: %w", base, err)
	}
	return adminPost(ctx, hc, base+"/quitquitquit")
}

func adminPost(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return fmt.Errorf("envoy admin POST %s: %w", url, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("envoy admin POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("envoy admin POST %s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

// RunCommand runs argv (no shell) with "{envoy}" and "{admin}" in its arguments replaced by the
// target's name and admin URL, bounded by timeout. Its output is not returned: a restart
// command may print anything, including secrets, so only the exit status is reported.
func RunCommand(ctx context.Context, argv []string, t Target, timeout time.Duration) error {
	if len(argv) == 0 {
		return errors.New("exec strategy: no command configured (--reload-exec)")
	}
	args := make([]string, len(argv))
	r := strings.NewReplacer("{envoy}", t.Envoy, "{admin}", t.AdminURL)
	for i, a := range argv {
		args[i] = r.Replace(a)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("exec %s for %s: timed out after %s", args[0], t.Envoy, timeout)
		}
		return fmt.Errorf("exec %s for %s: %w", args[0], t.Envoy, err)
	}
	return nil
}
