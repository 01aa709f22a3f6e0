#!/usr/bin/env bash
# version.sh prints certdrift's version: the one place every artifact takes it from (make build,
# GoReleaser, the ko image, the packaged Helm chart and its image tag, the kustomize bundle).
#
# The source is the git tag. `go install github.com/certdrift/certdrift/cmd/certdrift@v1.2.3` and
# GoReleaser both read the tag and nothing else, so a VERSION file would be a second source that
# could disagree with them. At a tag this prints the tag (v1.2.3); after it, git describe's
# v1.2.3-4-gabc1234; before the first tag, v0.0.0-<commits>-g<abbrev>; "-dirty" is appended when
# the tree has uncommitted changes. Every form is SemVer 2 (the part after the first "-" is one
# pre-release identifier), which `helm package --version` requires, and has no "+", which an
# image tag may not contain.
#
# Outside a git checkout (a source tarball) set CERTDRIFT_VERSION; without it, v0.0.0-unknown.
#
# Usage: scripts/version.sh            # the version
#        scripts/version.sh --commit   # the full commit id (or "unknown")
#        scripts/version.sh --date     # the commit's time, RFC 3339 UTC: reproducible, unlike
#                                      # the wall clock (or the Unix epoch outside git)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

in_git() { git rev-parse --is-inside-work-tree >/dev/null 2>&1; }

case ${1:-} in
--commit)
	if in_git; then git rev-parse HEAD; else echo unknown; fi
	exit 0
	;;
--date)
	if in_git; then TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD
	else echo 1970-01-01T00:00:00Z; fi
	exit 0
	;;
"") ;;
*) echo "usage: $0 [--commit|--date]" >&2; exit 2 ;;
esac

if [[ -n ${CERTDRIFT_VERSION:-} ]]; then
	v=$CERTDRIFT_VERSION
elif ! in_git; then
	v=v0.0.0-unknown
elif v=$(git describe --tags --match 'v[0-9]*.[0-9]*.[0-9]*' --dirty 2>/dev/null); then
	:
else
	# No release tag yet: count commits so that later builds sort after earlier ones.
	v=v0.0.0-$(git rev-list --count HEAD)-g$(git rev-parse --short=7 HEAD)
	# --ignore-submodules and untracked files excluded, as git describe --dirty does.
	git diff --quiet HEAD -- 2>/dev/null || v+=-dirty
fi
# The same check helm and the image tag apply, so a bad override fails here and not half-way.
if ! [[ $v =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "version.sh: $v is not v<major>.<minor>.<patch>[-<pre-release>] (SemVer 2 without build metadata)" >&2
	exit 1
fi
echo "$v"
