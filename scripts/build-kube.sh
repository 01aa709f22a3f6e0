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
# reports the wrong version. Builds run under `nice -n 19` because the machine is shared.
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
CACHE=${KUBE_CACHE_DIR:-$ROOT/.cache/kube}
OUT=$CACHE/$KUBE_VERSION
SRC=$CACHE/src
NICE=(nice -n 19)

# Static, stripped, path-free binaries, as the kubernetes release build makes them.
export CGO_ENABLED=0
BUILD_FLAGS=(-trimpath)

log() { printf '%s build-kube: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $KUBE_VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "KUBE_VERSION=$KUBE_VERSION is not a v1.<minor>.<patch> tag"
KUBE_MINOR=${BASH_REMATCH[1]}
KUBE_PATCH=${BASH_REMATCH[2]}
STAGING_VERSION=v0.$KUBE_MINOR.$KUBE_PATCH
[[ $ETCD_VERSION =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "ETCD_VERSION=$ETCD_VERSION is not a v3.<minor>.<patch> tag"

# want_output prints the line each binary's version command must contain.
want_output() {
	case $1 in
	kube-apiserver | kube-controller-manager) echo "Kubernetes $KUBE_VERSION" ;;
	kubectl) echo "Client Version: $KUBE_VERSION" ;;
	etcd) echo "etcd Version: ${ETCD_VERSION#v}" ;;
	esac
}

version_output() {
	local bin=$1
	case $(basename "$bin") in
	kubectl) timeout 20 "$bin" version --client 2>&1 ;;
	*) timeout 20 "$bin" --version 2>&1 ;;
	esac
}

# reports_version succeeds when binary $1 prints the version line wanted for name $2.
reports_version() {
	# Capture first: with pipefail, `grep -q` exiting at the first match can kill the writer
	# (kubectl prints a second line) with SIGPIPE and fail the pipeline intermittently.
	local out
	out=$(version_output "$1") || true
	grep -qF "$(want_output "$2")" <<<"$out"
}

# cached_ok succeeds when $OUT/<name> exists and reports the wanted version.
cached_ok() {
	[[ -x $OUT/$1 ]] && reports_version "$OUT/$1" "$1"
}

KUBE_BINS=(kube-apiserver kube-controller-manager kubectl)

if [[ ${1:-} == --check ]]; then
	for b in "${KUBE_BINS[@]}" etcd; do
		cached_ok "$b" || { log "$OUT/$b missing or not $(want_output "$b")"; exit 1; }
	done
	echo "$OUT"
	exit 0
fi

mkdir -p "$OUT" "$SRC"
# One builder at a time: a second caller waits, then finds the cache filled.
exec 9>"$CACHE/.lock"
flock 9

need_kube=0 need_etcd=0
if [[ ${FORCE:-0} == 1 ]]; then
	need_kube=1 need_etcd=1
else
	for b in "${KUBE_BINS[@]}"; do cached_ok "$b" || need_kube=1; done
	cached_ok etcd || need_etcd=1
fi

# kube_gomod prints the path of k8s.io/kubernetes's go.mod, downloading it if needed.
kube_gomod() {
	local f
	f=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	[[ -s $f ]] || die "could not download go.mod of k8s.io/kubernetes@$KUBE_VERSION (is the Go module proxy reachable?)"
	echo "$f"
}

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
	local gomod dir mods m commit date ldflags pkg tmp
	local start=$SECONDS
	gomod=$(kube_gomod)
	mapfile -t mods < <(staging_modules "$gomod")
	((${#mods[@]} > 10)) || die "found only ${#mods[@]} staging modules in $gomod; its replace block changed shape"
	log "k8s.io/kubernetes@$KUBE_VERSION: ${#mods[@]} staging modules pinned to $STAGING_VERSION"

	dir=$SRC/kubernetes-$KUBE_VERSION
	mkdir -p "$dir"
	{
		echo "// Generated by scripts/build-kube.sh: a wrapper that builds kubernetes commands outside its repository."
		echo "module certdrift.test/kubebuild"
		echo
		# Keep kubernetes' own language version and GODEBUG defaults: they apply to the main module.
		grep -E '^(go|godebug) ' "$gomod"
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
	log "resolving modules in $dir (go mod tidy)"
	(cd "$dir" && "${NICE[@]}" go mod tidy) || die "go mod tidy in $dir failed"

	# The proxy records the tag's commit only for some modules; report it when known.
	commit=${KUBE_GIT_COMMIT:-$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]\{40\}\)".*/\1/p' | head -1)}
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

	tmp=$(mktemp -d "$OUT/.build.XXXXXX")
	log "building ${KUBE_BINS[*]} (this takes a long time on a busy machine)"
	(cd "$dir" && "${NICE[@]}" go build "${BUILD_FLAGS[@]}" -ldflags "$ldflags" -o "$tmp/" \
		$(printf 'k8s.io/kubernetes/cmd/%s ' "${KUBE_BINS[@]}")) || { rm -rf "$tmp"; die "go build of kubernetes commands failed"; }
	for b in "${KUBE_BINS[@]}"; do
		reports_version "$tmp/$b" "$b" ||
			die "$tmp/$b built but does not report $(want_output "$b"): $(version_output "$tmp/$b" | head -3)"
		mv -f "$tmp/$b" "$OUT/$b"
	done
	rm -rf "$tmp"
	log "kubernetes commands built in $((SECONDS - start))s"
}

build_etcd() {
	local dir tmp start=$SECONDS
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
	log "resolving modules in $dir (go mod tidy)"
	(cd "$dir" && "${NICE[@]}" go mod tidy) || die "go mod tidy in $dir failed"
	tmp=$(mktemp -d "$OUT/.build.XXXXXX")
	log "building etcd $ETCD_VERSION"
	(cd "$dir" && "${NICE[@]}" go build "${BUILD_FLAGS[@]}" -ldflags "-s -w" -o "$tmp/etcd" .) ||
		{ rm -rf "$tmp"; die "go build of etcd failed"; }
	reports_version "$tmp/etcd" etcd ||
		die "etcd built but does not report $(want_output etcd): $(version_output "$tmp/etcd" | head -3)"
	mv -f "$tmp/etcd" "$OUT/etcd"
	rm -rf "$tmp"
	log "etcd built in $((SECONDS - start))s"
}

((need_etcd)) && build_etcd
((need_kube)) && build_kube
((need_etcd || need_kube)) || log "cache hit: $OUT"
for b in "${KUBE_BINS[@]}" etcd; do
	cached_ok "$b" || die "$OUT/$b still missing or wrong after the build"
done
echo "$OUT"
