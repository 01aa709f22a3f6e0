#!/usr/bin/env bash
# build-envoy-gateway.sh builds the real Envoy Gateway control plane once and caches it, with the
# CRDs it needs, for the tests that run it on the test cluster (test/testbed, issue 18):
#
#   .cache/envoy-gateway/<version>/envoy-gateway   `envoy-gateway version` reports <version>
#   .cache/envoy-gateway/<version>/crds.yaml       Gateway API (experimental channel) + Envoy Gateway CRDs
#   .cache/envoy-gateway/src/gateway-<version>/    the wrapper module (go.mod/go.sum kept)
#
# envoy-gateway comes from the Go module github.com/envoyproxy/gateway through a throwaway wrapper
# module that requires it and lists cmd/envoy-gateway as a tool, so nothing here touches the
# certdrift go.mod. The version variables are the ones the gateway's Makefile sets with -X
# (internal/cmd/version.envoyGatewayVersion, gitCommitID); without them `envoy-gateway version`
# prints an empty ENVOY_GATEWAY_VERSION.
#
# The CRDs are rendered from the module's own chart, charts/gateway-crds-helm, with the cached
# helm (scripts/build-helm.sh, built on demand), gatewayAPI and envoyGateway both enabled; the
# channel is the chart's default (experimental), which is what the gateway's quickstart installs.
# They stay in the cache: 5 MB of generated YAML has no place in the certdrift repository.
#
# A rerun checks the cached binary's `envoy-gateway version` and that crds.yaml holds the
# GatewayClass and EnvoyProxy CRDs, and rebuilds only what is missing or wrong. Builds run under
# `nice -n 19` because the machine is shared; concurrent runs serialize on a flock.
# The steps shared with the other Go-module builds are in scripts/lib/gobuild.sh.
#
# Environment:
#   EG_VERSION     envoyproxy/gateway tag to build (default v1.9.1)
#   EG_CACHE_DIR   cache root (default <repo>/.cache/envoy-gateway)
#   FORCE=1        rebuild even when the cache looks good
# Usage: scripts/build-envoy-gateway.sh          # build or reuse; prints the cache directory last
#        scripts/build-envoy-gateway.sh --check  # exit 0 only if binary and CRDs are cached and correct
set -euo pipefail

EG_VERSION=${EG_VERSION:-v1.9.1}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib/gobuild.sh
source "$ROOT/scripts/lib/gobuild.sh"
CACHE=${EG_CACHE_DIR:-$ROOT/.cache/envoy-gateway}
OUT=$CACHE/$EG_VERSION
SRC=$CACHE/src
MODULE=github.com/envoyproxy/gateway

[[ $EG_VERSION =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "EG_VERSION=$EG_VERSION is not a v1.<minor>.<patch> tag"

# shellcheck disable=SC2317 # called through gb_binary_ok and gb_build
reports_version() { gb_reports "$1" "ENVOY_GATEWAY_VERSION: $EG_VERSION" version; }

# crds_ok succeeds when file $1 defines the CRDs the control plane cannot start without.
crds_ok() { gb_crds_ok "$1" gatewayclasses.gateway.networking.k8s.io envoyproxies.gateway.envoyproxy.io; }

binary_ok() { gb_binary_ok "$OUT/envoy-gateway" reports_version; }

if [[ ${1:-} == --check ]]; then
	gb_need "$OUT/envoy-gateway missing or not $EG_VERSION (run make envoy-gateway)" binary_ok
	gb_need "$OUT/crds.yaml missing or incomplete (run make envoy-gateway)" crds_ok "$OUT/crds.yaml"
	gb_result "$OUT"
fi

gb_lock "$CACHE" "$OUT" "$SRC"
need_bin=1 need_crds=1
gb_reuse binary_ok && need_bin=0
gb_reuse crds_ok "$OUT/crds.yaml" && need_crds=0
((need_bin || need_crds)) || gb_result "$OUT" "cache hit"

start=$SECONDS

build_binary() {
	local dir gomod ldflags commit pkg=$MODULE/internal/cmd/version
	gomod=$(gb_gomod "$MODULE" "$EG_VERSION")
	dir=$SRC/gateway-$EG_VERSION
	# The gateway's replace directives are copied (v1.9.1 has none; earlier releases replaced some
	# modules).
	gb_wrapper "$dir" certdrift.test/egbuild "$gomod" \
		"a wrapper that builds envoy-gateway outside its repository." "$MODULE" "$EG_VERSION" "$MODULE/cmd/envoy-gateway"
	gb_tidy "$dir"
	commit=$(gb_commit "$MODULE" "$EG_VERSION")
	ldflags="-s -w -X $pkg.envoyGatewayVersion=$EG_VERSION -X $pkg.gitCommitID=$commit"
	log "building envoy-gateway $EG_VERSION (this takes a long time on a busy machine)"
	gb_build "$dir" "$ldflags" reports_version "$OUT/envoy-gateway=$MODULE/cmd/envoy-gateway"
	log "envoy-gateway built in $((SECONDS - start))s"
}

render_crds() {
	local moddir chart helm tmp
	moddir=$(gb_moddir "$MODULE" "$EG_VERSION")
	chart=$moddir/charts/gateway-crds-helm
	[[ -f $chart/Chart.yaml ]] || die "no charts/gateway-crds-helm in $MODULE@$EG_VERSION ($moddir)"
	helm=$("$ROOT/scripts/build-helm.sh") || die "scripts/build-helm.sh failed: helm renders the CRD chart"
	tmp=$(mktemp "$OUT/.crds.XXXXXX")
	"$helm" template eg-crds "$chart" \
		--set crds.gatewayAPI.enabled=true --set crds.envoyGateway.enabled=true >"$tmp" ||
		{ rm -f "$tmp"; die "helm template $chart failed"; }
	crds_ok "$tmp" || { rm -f "$tmp"; die "$chart rendered without the GatewayClass or EnvoyProxy CRD"; }
	chmod 0644 "$tmp" # mktemp makes it 0600; it is public YAML
	mv -f "$tmp" "$OUT/crds.yaml"
	log "CRDs rendered from $chart: $(grep -c '^kind: CustomResourceDefinition$' "$OUT/crds.yaml") CustomResourceDefinitions"
}

((need_crds)) && render_crds
((need_bin)) && build_binary
binary_ok || die "$OUT/envoy-gateway still missing or wrong after the build"
crds_ok "$OUT/crds.yaml" || die "$OUT/crds.yaml still missing or wrong after the build"
gb_result "$OUT"
