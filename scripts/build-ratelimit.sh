#!/usr/bin/env bash
# build-ratelimit.sh builds the real Envoy rate limit service once and caches it, for the tests
# that run it as Envoy Gateway deploys it when global rate limiting is on (test/testbed, issue 18):
#
#   .cache/ratelimit/<version>/ratelimit     `go version -m` names github.com/envoyproxy/ratelimit <version>
#   .cache/ratelimit/src/ratelimit-<version>/ the wrapper module (go.mod/go.sum kept)
#
# The service comes from the Go module github.com/envoyproxy/ratelimit (package src/service_cmd,
# the binary the project's Dockerfile builds as /bin/ratelimit) through a throwaway wrapper module
# that requires it and lists that package as a tool, so nothing here touches the certdrift go.mod.
# The project tags no releases for what Envoy Gateway runs: EG v1.9.1 pins the image
# envoyproxy/ratelimit:8fe6ea42, a commit the module proxy does not serve (403), so the default is
# the newest pseudo-version the proxy serves. The binary has no version flag; its embedded build
# information (`go version -m`) is what a rerun checks.
#
# A rerun checks the cached binary's module version and rebuilds only when it is missing or wrong.
# Builds run under `nice -n 19` because the machine is shared; concurrent runs serialize on a flock.
# The steps shared with the other Go-module builds are in scripts/lib/gobuild.sh.
#
# Environment:
#   RATELIMIT_VERSION    module version to build (default below; `latest` resolves through the proxy)
#   RATELIMIT_CACHE_DIR  cache root (default <repo>/.cache/ratelimit)
#   FORCE=1              rebuild even when the cache looks good
# Usage: scripts/build-ratelimit.sh          # build or reuse; prints the binary's directory last
#        scripts/build-ratelimit.sh --check  # exit 0 only if the binary is cached and correct
set -euo pipefail

RATELIMIT_VERSION=${RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib/gobuild.sh
source "$ROOT/scripts/lib/gobuild.sh"
CACHE=${RATELIMIT_CACHE_DIR:-$ROOT/.cache/ratelimit}
MODULE=github.com/envoyproxy/ratelimit
PKG=$MODULE/src/service_cmd

if [[ $RATELIMIT_VERSION == latest ]]; then
	RATELIMIT_VERSION=$(gb_mod_field "$MODULE@latest" Version)
	[[ -n $RATELIMIT_VERSION ]] || die "could not resolve $MODULE@latest (is the Go module proxy reachable?)"
fi
[[ $RATELIMIT_VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "RATELIMIT_VERSION=$RATELIMIT_VERSION is not a module version"
OUT=$CACHE/$RATELIMIT_VERSION
SRC=$CACHE/src

# built_from succeeds when binary $1 is $PKG from $MODULE at $RATELIMIT_VERSION, by its embedded
# build information: building a package of a required module makes that module the "mod" line.
# shellcheck disable=SC2317 # called through gb_binary_ok and gb_build
built_from() {
	local out
	out=$(go version -m "$1" 2>/dev/null) || return 1
	awk -v pkg="$PKG" -v mod="$MODULE" -v ver="$RATELIMIT_VERSION" '
		$1 == "path" && $2 == pkg { p = 1 }
		$1 == "mod" && $2 == mod && $3 == ver { m = 1 }
		END { exit !(p && m) }' <<<"$out" && return 0
	GB_WHY="its build information does not name $MODULE $RATELIMIT_VERSION"
	return 1
}

binary_ok() { gb_binary_ok "$OUT/ratelimit" built_from; }

if [[ ${1:-} == --check ]]; then
	gb_need "$OUT/ratelimit missing or not $RATELIMIT_VERSION (run make ratelimit)" binary_ok
	gb_result "$OUT"
fi

gb_lock "$CACHE" "$OUT" "$SRC"
gb_reuse binary_ok && gb_result "$OUT" "cache hit"

start=$SECONDS
gomod=$(gb_gomod "$MODULE" "$RATELIMIT_VERSION")
dir=$SRC/ratelimit-$RATELIMIT_VERSION
# The service's own replace directives, if it has any, are copied: a dependency's do not apply.
gb_wrapper "$dir" certdrift.test/ratelimitbuild "$gomod" \
	"a wrapper that builds the rate limit service outside its repository." "$MODULE" "$RATELIMIT_VERSION" "$PKG"
gb_tidy "$dir"
log "building ratelimit $RATELIMIT_VERSION"
gb_build "$dir" "-s -w" built_from "$OUT/ratelimit=$PKG"
log "ratelimit built in $((SECONDS - start))s"
binary_ok || die "$OUT/ratelimit still missing or wrong after the build"
gb_result "$OUT"
