package main

import (
	"log/slog"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/oneshot"
)

// source is where a one-shot command (audit, preflight) reads its round: the config file, of
// which in Kubernetes mode only peer pairings and policy apply, the policy after the command's
// flags (policyOf), and in Kubernetes mode the cluster these flags name.
func (k kubeFlags) source(configPath string, policyOf func(config.Policy) config.Policy, concurrency int, log *slog.Logger) oneshot.Options {
	o := oneshot.Options{Config: configPath, Policy: policyOf, Concurrency: concurrency, Log: log}
	if k.enabled() {
		o.Kube = &oneshot.Kube{Options: k.options, REST: k.restConfig}
	}
	return o
}
