// Command testbed runs the certdrift test cluster for a person: real etcd, kube-apiserver and
// kube-controller-manager on loopback ports (see test/testbed/README.md). It prints the admin
// kubeconfig path and runs until SIGINT or SIGTERM, then stops every process it started and
// removes its directory. `make testbed` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/certdrift/certdrift/test/testbed"
	"k8s.io/klog/v2"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process exit, so exit codes are visible in one place: 0 after a clean
// stop on a signal, 1 when the testbed cannot start or stop, 2 on bad flags.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testbed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for PKI, etcd data, kubeconfigs and logs (default: a temporary directory, removed on exit)")
	binDir := fs.String("bin-dir", "", "directory holding etcd, kube-apiserver, kube-controller-manager and kubectl (default: $"+testbed.BinDirEnv+" or .cache/kube/"+testbed.KubeVersion+")")
	timeout := fs.Duration("start-timeout", 2*time.Minute, "how long the control plane may take to start")
	verbose := fs.Bool("v", false, "log progress at debug level")
	envoyPaths := fs.String("envoy-paths", "", "how Envoy pods see their volumes: mountns (own mount namespace, container paths; needs root) or rewrite (node paths); default: mountns as root, else rewrite, or $"+testbed.PathModeEnv)
	scenario := fs.String("scenario", "test/scenarios/plain-sds", "scenario directory to deploy once the cluster is up (plain-sds or static-tls; \"\" for none)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "testbed: unexpected arguments %q\n", fs.Args())
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// client-go and the kubelet streaming code (port-forward) log through klog: one format.
	klog.SetSlogLogger(log)

	// The first signal stops the testbed; a start in progress is abandoned.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tb, err := testbed.Start(ctx, testbed.Options{Dir: *dir, BinDir: *binDir, StartTimeout: *timeout, Logger: log,
		EnvoyPaths: testbed.PathMode(*envoyPaths)})
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			fmt.Fprintln(stderr, "testbed: interrupted while starting")
		} else {
			fmt.Fprintf(stderr, "testbed: %v\n", err)
		}
		return 1
	}
	if *scenario != "" {
		start := time.Now()
		if err := deployScenario(ctx, tb, *scenario); err != nil {
			fmt.Fprintf(stderr, "testbed: %v\n", err)
			tb.Stop()
			return 1
		}
		fmt.Fprintf(stdout, "scenario %s: pods Ready in %s\n", filepath.Base(*scenario), time.Since(start).Round(10*time.Millisecond))
	}
	fmt.Fprintf(stdout, "testbed ready in %s\n", tb.StartDuration.Round(10*time.Millisecond))
	fmt.Fprintf(stdout, "envoy paths: %s\n", tb.EnvoyPaths)
	fmt.Fprintf(stdout, "kubeconfig: %s\n", tb.KubeconfigPath)
	fmt.Fprintf(stdout, "try:        %s/kubectl --kubeconfig %s get pods -A\n", tb.BinDir, tb.KubeconfigPath)
	fmt.Fprintf(stdout, "logs:       %s/logs/\n", tb.Dir)
	fmt.Fprintln(stdout, "press Ctrl-C to stop")

	<-ctx.Done()
	stop() // a second Ctrl-C now kills the process the default way
	fmt.Fprintln(stdout, "stopping testbed")
	if err := tb.Stop(); err != nil {
		fmt.Fprintf(stderr, "testbed: stop: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "testbed stopped")
	return 0
}
