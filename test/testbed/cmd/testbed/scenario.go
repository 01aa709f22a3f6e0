package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
	"github.com/certdrift/certdrift/test/testbed"
)

// deployScenario runs a scenario from test/scenarios the way its README tells a person to: create
// its namespace, a TLS Secret from a freshly minted certificate (keys are never checked in), then
// `kubectl apply -f` the directory. It is what makes `kubectl get pods -A` show Envoy pods right
// after `make testbed`.
func deployScenario(ctx context.Context, tb *testbed.Testbed, dir string) error {
	if !filepath.IsAbs(dir) { // relative to the repository, so the command works from any directory
		root, err := envoytest.RepoRoot()
		if err != nil {
			return err
		}
		dir = filepath.Join(root, dir)
	}
	ns, secret, host := filepath.Base(dir), "web-tls", "web.example.com"
	if ns != "plain-sds" && ns != "static-tls" {
		return fmt.Errorf("scenario %s: only plain-sds and static-tls deploy on their own (the others need the Secrets their tests create)", ns)
	}
	f := &fatal{}
	var leaf *certs.Leaf
	if err := f.catch(func() {
		ca := certs.NewCA(f, certs.WithCommonName("testbed-ca"))
		leaf = ca.Leaf(f, certs.WithCommonName(host), certs.WithDNSNames(host))
	}); err != nil {
		return fmt.Errorf("mint the scenario's certificate: %w", err)
	}
	// Written under the testbed's own directory (removed on exit), readable by us only.
	certFile, keyFile := filepath.Join(tb.Dir, ns+"-tls.crt"), filepath.Join(tb.Dir, ns+"-tls.key")
	if err := os.WriteFile(certFile, leaf.ChainPEM(), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, leaf.KeyPEM, 0o600); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"apply", "-f", filepath.Join(dir, "00-namespace.yaml")},
		{"-n", ns, "create", "secret", "tls", secret, "--cert=" + certFile, "--key=" + keyFile},
		{"apply", "-f", dir},
	} {
		if out, err := tb.Kubectl(ctx, args...); err != nil {
			return fmt.Errorf("scenario %s: %w\n%s", ns, err, out)
		}
	}
	if _, err := tb.WaitPodsReady(ctx, ns, "app=envoy"); err != nil {
		return fmt.Errorf("scenario %s: pods not ready: %w", ns, err)
	}
	return nil
}

// fatal lets test/certs, which reports failures through a testing.TB-like Fatalf, be used here.
type fatal struct{ msg string }

type fatalPanic struct{}

func (f *fatal) Helper() {}

func (f *fatal) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(fatalPanic{})
}

func (f *fatal) catch(fn func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(fatalPanic); !ok {
				panic(p)
			}
			err = fmt.Errorf("%s", f.msg)
		}
	}()
	fn()
	return nil
}
