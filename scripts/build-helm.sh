#!/usr/bin/env bash
# build-helm.sh builds the helm CLI once and caches it for the chart tests (deploy/helm_test.go):
#
#   .cache/helm/<helm-version>/helm
#
# helm comes from the Go module helm.sh/helm/v3 through a throwaway wrapper module that requires
# it and lists cmd/helm as a tool, so nothing here touches the certdrift go.mod. The ldflags are
# the ones helm's own Makefile sets: the version (internal/version.version) and the Kubernetes
# version that `helm lint` and `helm template` assume (k8sVersionMajor/Minor, from the client-go
# the module requires); without them `helm version` prints the bare "v3.22".
#
# A rerun checks the cached binary's `helm version` output and rebuilds only when it is missing
# or wrong. Builds run under `nice -n 19` because the machine is shared; concurrent runs serialize
# on a flock. The steps shared with the other Go-module builds are in scripts/lib/gobuild.sh.
#
# Environment:
#   HELM_VERSION    helm tag to build (default v3.22.0)
#   HELM_CACHE_DIR  cache root (default <repo>/.cache/helm)
#   FORCE=1         rebuild even when the cache looks good
# Usage: scripts/build-helm.sh            # build or reuse; prints the binary path last
#        scripts/build-helm.sh --check    # exit 0 only if the binary is cached and correct
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib/gobuild.sh
source "$ROOT/scripts/lib/gobuild.sh"
CACHE=${HELM_CACHE_DIR:-$ROOT/.cache/helm}
OUT=$CACHE/$HELM_VERSION
SRC=$CACHE/src
MODULE=helm.sh/helm/v3

[[ $HELM_VERSION =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "HELM_VERSION=$HELM_VERSION is not a v3.<minor>.<patch> tag"

# shellcheck disable=SC2317 # called through gb_binary_ok and gb_build
reports_version() { gb_reports "$1" "$HELM_VERSION" version --template '{{.Version}}'; }
cached_ok() { gb_binary_ok "$OUT/helm" reports_version; }

if [[ ${1:-} == --check ]]; then
	gb_need "$OUT/helm missing or not $HELM_VERSION" cached_ok
	gb_result "$OUT/helm"
fi

gb_lock "$CACHE" "$OUT" "$SRC"
gb_reuse cached_ok && gb_result "$OUT/helm" "cache hit"

start=$SECONDS
gomod=$(gb_gomod "$MODULE" "$HELM_VERSION")

# The Kubernetes version helm assumes, derived as helm's Makefile does: client-go v0.M.N -> 1.M.
client_go=$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$gomod")
[[ $client_go =~ ^v0\.([0-9]+)\.[0-9]+$ ]] || die "cannot find k8s.io/client-go v0.<minor>.<patch> in $gomod (found '$client_go')"
k8s_minor=${BASH_REMATCH[1]}

dir=$SRC/helm-$HELM_VERSION
gb_wrapper "$dir" certdrift.test/helmbuild "$gomod" "a wrapper that builds the helm CLI outside its repository." \
	"$MODULE" "$HELM_VERSION" "$MODULE/cmd/helm"
gb_tidy "$dir"

ldflags="-s -w"
ldflags+=" -X $MODULE/internal/version.version=$HELM_VERSION"
ldflags+=" -X $MODULE/internal/version.gitTreeState=clean"
for pkg in $MODULE/pkg/lint/rules $MODULE/pkg/chartutil; do
	ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

log "building helm $HELM_VERSION (Kubernetes 1.$k8s_minor)"
gb_build "$dir" "$ldflags" reports_version "$OUT/helm=$MODULE/cmd/helm"
log "helm built in $((SECONDS - start))s"
cached_ok || die "$OUT/helm still missing or wrong after the build"
gb_result "$OUT/helm"
