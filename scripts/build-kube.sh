#!/usr/bin/env bash
# build-kube.sh builds the testbed's control-plane binaries once and caches them:
#
#   .cache/kube/<kube-version>/{kube-apiserver,kube-controller-manager,kubectl,etcd}
#
# kube-* come from k8s.io/kubernetes through a throwaway wrapper module whose go.mod pins every
# staging module (k8s.io/api, client-go, ...) to the matching v0.<minor>.<patch>: the published
# k8s.io/kubernetes module requires them at v0.0.0 and replaces them with ./staging paths, which
# only work inside the kubernetes repository. etcd comes from go.etcd.io/etcd/server/v3 through a
# two-line main calling etcdmain.Main. Nothing here touches the certdrift go.mod.
#
# A rerun checks each cached binary's --version output and rebuilds only what is missing or
# reports the wrong version. Builds run under `nice -n 19` because the machine is shared;
# concurrent runs serialize on a flock. The steps shared with the other Go-module builds are in
# scripts/lib/gobuild.sh; the wrapper's go.mod is this script's own (staging pins, several tools).
#
# Environment:
#   KUBE_VERSION    kubernetes tag to build (default v1.36.3)
#   ETCD_VERSION    etcd server tag (default v3.6.16)
#   KUBE_CACHE_DIR  cache root (default <repo>/.cache/kube)
#   KUBE_GIT_COMMIT commit reported by --version (default: from the module proxy's origin data,
#                   else empty)
#   FORCE=1         rebuild even when the cache looks good
# Usage: scripts/build-kube.sh            # build or reuse; prints the binary directory last
#        scripts/build-kube.sh --check    # exit 0 only if every binary is cached and correct
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib/gobuild.sh
source "$ROOT/scripts/lib/gobuild.sh"
CACHE=${KUBE_CACHE_DIR:-$ROOT/.cache/kube}
OUT=$CACHE/$KUBE_VERSION
SRC=$CACHE/src

[[ $KUBE_VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "KUBE_VERSION=$KUBE_VERSION is not a v1.<minor>.<patch> tag"
KUBE_MINOR=${BASH_REMATCH[1]}
KUBE_PATCH=${BASH_REMATCH[2]}
STAGING_VERSION=v0.$KUBE_MINOR.$KUBE_PATCH
[[ $ETCD_VERSION =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "ETCD_VERSION=$ETCD_VERSION is not a v3.<minor>.<patch> tag"

# want_output prints the line each binary's version command must print.
want_output() {
	case $1 in
	kube-apiserver | kube-controller-manager) echo "Kubernetes $KUBE_VERSION" ;;
	kubectl) echo "Client Version: $KUBE_VERSION" ;;
	etcd) echo "etcd Version: ${ETCD_VERSION#v}" ;;
	esac
}

# reports_version succeeds when binary $1 prints the version line wanted for its name.
# shellcheck disable=SC2317 # called through gb_binary_ok and gb_build
reports_version() {
	local name
	name=$(basename "$1")
	case $name in
	kubectl) gb_reports "$1" "$(want_output "$name")" version --client ;;
	*) gb_reports "$1" "$(want_output "$name")" --version ;;
	esac
}

# cached_ok succeeds when $OUT/<name> exists and reports the wanted version.
# shellcheck disable=SC2317 # called through gb_need and gb_reuse
cached_ok() { gb_binary_ok "$OUT/$1" reports_version; }

KUBE_BINS=(kube-apiserver kube-controller-manager kubectl)

if [[ ${1:-} == --check ]]; then
	for b in "${KUBE_BINS[@]}" etcd; do
		gb_need "$OUT/$b missing or not $(want_output "$b")" cached_ok "$b"
	done
	gb_result "$OUT"
fi

gb_lock "$CACHE" "$OUT" "$SRC"
need_kube=0 need_etcd=0
for b in "${KUBE_BINS[@]}"; do gb_reuse cached_ok "$b" || need_kube=1; done
gb_reuse cached_ok etcd || need_etcd=1
((need_etcd || need_kube)) || gb_result "$OUT" "cache hit"

# staging_modules lists the k8s.io modules that kubernetes both requires and replaces with a
# ./staging/src path; a replace for a module it does not require (sample-cli-plugin is not even
# published) would only add noise.
staging_modules() {
	local gomod=$1
	awk '
		/^replace[[:space:]]*\(/ { inrep = 1; next }
		inrep && /^\)/ { inrep = 0 }
		inrep && $2 == "=>" && $3 ~ /^\.\/staging\/src\// { rep[$1] = 1 }
		/^require[[:space:]]*\(/ { inreq = 1; next }
		inreq && /^\)/ { inreq = 0 }
		inreq && $1 ~ /^k8s\.io\// { req[$1] = 1 }
		END { for (m in rep) if (m in req) print m }
	' "$gomod" | sort
}

build_kube() {
	local gomod dir mods m b commit date ldflags pkg targets=()
	local start=$SECONDS
	gomod=$(gb_gomod k8s.io/kubernetes "$KUBE_VERSION")
	mapfile -t mods < <(staging_modules "$gomod")
	((${#mods[@]} > 10)) || die "found only ${#mods[@]} staging modules in $gomod; its replace block changed shape"
	log "k8s.io/kubernetes@$KUBE_VERSION: ${#mods[@]} staging modules pinned to $STAGING_VERSION"

	dir=$SRC/kubernetes-$KUBE_VERSION
	mkdir -p "$dir"
	# Not gb_wrapper: kubernetes' own replace directives point into ./staging, which exists only
	# in its repository; the wrapper pins those modules to their published versions instead.
	{
		gb_gomod_head certdrift.test/kubebuild "$gomod" "a wrapper that builds kubernetes commands outside its repository."
		echo
		echo "require k8s.io/kubernetes $KUBE_VERSION"
		echo
		echo "replace ("
		for m in "${mods[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION"; done
		echo ")"
		echo
		echo "tool ("
		for b in "${KUBE_BINS[@]}"; do printf '\tk8s.io/kubernetes/cmd/%s\n' "$b"; done
		echo ")"
	} >"$dir/go.mod"
	gb_tidy "$dir"

	commit=${KUBE_GIT_COMMIT:-$(gb_commit k8s.io/kubernetes "$KUBE_VERSION")}
	date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	ldflags="-s -w"
	# Same variables hack/lib/version.sh sets, in both packages that carry them.
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X '$pkg.gitVersion=$KUBE_VERSION'"
		ldflags+=" -X '$pkg.gitMajor=1'"
		ldflags+=" -X '$pkg.gitMinor=$KUBE_MINOR'"
		ldflags+=" -X '$pkg.gitCommit=$commit'"
		ldflags+=" -X '$pkg.gitTreeState=clean'"
		ldflags+=" -X '$pkg.buildDate=$date'"
	done

	for b in "${KUBE_BINS[@]}"; do targets+=("$OUT/$b=k8s.io/kubernetes/cmd/$b"); done
	log "building ${KUBE_BINS[*]} (this takes a long time on a busy machine)"
	gb_build "$dir" "$ldflags" reports_version "${targets[@]}"
	log "kubernetes commands built in $((SECONDS - start))s"
}

build_etcd() {
	local dir start=$SECONDS
	dir=$SRC/etcd-$ETCD_VERSION
	mkdir -p "$dir"
	cat >"$dir/go.mod" <<EOF
// Generated by scripts/build-kube.sh: a wrapper that builds the etcd server binary.
module certdrift.test/etcdbuild

go 1.26.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOF
	cat >"$dir/main.go" <<'EOF'
// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 by scripts/build-kube.sh.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
	gb_tidy "$dir"
	log "building etcd $ETCD_VERSION"
	gb_build "$dir" "-s -w" reports_version "$OUT/etcd=."
	log "etcd built in $((SECONDS - start))s"
}

((need_etcd)) && build_etcd
((need_kube)) && build_kube
for b in "${KUBE_BINS[@]}" etcd; do
	cached_ok "$b" || die "$OUT/$b still missing or wrong after the build"
done
gb_result "$OUT"
