#!/usr/bin/env bash
# package-deploy.sh packages the Kubernetes install methods with the version from
# scripts/version.sh, into dist/ (or $DIST):
#
#   certdrift-<semver>.tgz                the Helm chart (`helm package`): version <semver> (the
#                                         version without its "v"), appVersion v<semver>, so the
#                                         image tag defaults to the release's image
#   certdrift-kustomize-<version>.tar.gz  deploy/kustomize with the base's image tag set to the
#                                         version (the source tree's is "latest")
#
# helm is the cached build of scripts/build-helm.sh. The tarball is reproducible (sorted names,
# the commit's time, no owner), so a rebuild of one commit gives the same checksum.
#
# Environment: VERSION (default: scripts/version.sh), DIST (default <repo>/dist).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VERSION=${VERSION:-$(scripts/version.sh)}
DIST=${DIST:-$ROOT/dist}
die() { echo "package-deploy: $*" >&2; exit 1; }

[[ $VERSION == v* ]] || die "VERSION=$VERSION does not start with v (scripts/version.sh's form)"
chart_version=${VERSION#v}
helm=$(scripts/build-helm.sh --check) || die "the helm CLI is not built: run make helm"

mkdir -p "$DIST"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# helm's state directories in the scratch directory: packaging reads no repositories.
export HELM_CACHE_HOME=$work/helm/cache HELM_CONFIG_HOME=$work/helm/config HELM_DATA_HOME=$work/helm/data

rm -f "$DIST"/certdrift-[0-9]*.tgz "$DIST"/certdrift-kustomize-*.tar.gz
"$helm" lint --quiet deploy/helm/certdrift >/dev/null || die "helm lint deploy/helm/certdrift failed (run it to see why)"
"$helm" package deploy/helm/certdrift --version "$chart_version" --app-version "$VERSION" \
	--destination "$DIST" >/dev/null || die "helm package failed"
chart=$DIST/certdrift-$chart_version.tgz
[[ -s $chart ]] || die "helm package wrote no $chart"

name=certdrift-kustomize-$VERSION
cp -r deploy/kustomize "$work/$name"
base=$work/$name/base/kustomization.yaml
grep -q '^    newTag: latest$' "$base" || die "deploy/kustomize/base/kustomization.yaml has no 'newTag: latest' line to stamp"
sed -i "s|^    newTag: latest\$|    newTag: $VERSION|" "$base"
mtime=$(scripts/version.sh --date)
tar -C "$work" --sort=name --mtime="$mtime" --owner=0 --group=0 --numeric-owner -cf - "$name" |
	gzip -n >"$DIST/$name.tar.gz"

echo "$chart"
echo "$DIST/$name.tar.gz"
