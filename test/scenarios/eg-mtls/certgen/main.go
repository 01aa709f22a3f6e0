package certgen

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Main is the rotate command: flags -kubeconfig, -namespace, -bundle and -step (wait for a
// line on stdin after each Secret but the last, so a person — or a test — can look at the
// window where only some Secrets are rotated). It returns the exit code: 0 done, 1 failed,
// 2 bad usage.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rotate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default $KUBECONFIG)")
	namespace := fs.String("namespace", "eg-mtls", "namespace of the Secrets envoy, envoy-gateway, envoy-rate-limit")
	bundle := fs.Bool("bundle", true, "write ca.crt = [newCA, oldCA] (PR #8534) instead of [newCA]")
	step := fs.Bool("step", false, "after each Secret but the last, wait for a line on stdin")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rotate: unexpected arguments %q\n", fs.Args())
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(stderr, "rotate: load kubeconfig %q: %v\n", *kubeconfig, err)
		return 1
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rotate: client for %s: %v\n", cfg.Host, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	lines := bufio.NewScanner(io.LimitReader(stdin, 1<<20))
	o := Options{Namespace: *namespace, Bundle: *bundle, Log: stdout}
	if *step {
		last := Targets[len(Targets)-1].Secret
		o.AfterWrite = func(secret string) error {
			if secret == last {
				return nil
			}
			fmt.Fprintf(stdout, "press Enter to write the next Secret\n")
			if !lines.Scan() {
				return errors.Join(errors.New("stdin closed before the next Secret"), lines.Err())
			}
			return nil
		}
	}
	if err := Rotate(ctx, c, o); err != nil {
		fmt.Fprintf(stderr, "rotate: %v\n", err)
		return 1
	}
	return 0
}
