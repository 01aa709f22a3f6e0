#!/usr/bin/env bash
# envoy-packages.sh: print the Go packages whose tests run a real Envoy, i.e. whose test binary
# depends (directly or not) on test/envoytest. The Makefile runs these once more per extra Envoy
# version. Prints nothing when no package does.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
harness=github.com/certdrift/certdrift/test/envoytest
# With -test, go list reports each package's test variant as "pkg [pkg.test]" with its full
# dependency list; the package itself is matched too since its own tests use the harness. An
# external test package ("pkg_test [pkg.test]") stands for pkg.
go list -e -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... |
  awk -v h="$harness" '{ for (i = 2; i <= NF; i++) if ($i == h || $1 ~ "^" h " ") { print $1; break } }' |
  sed -e 's/ \[.*//' -e 's/\.test$//' -e 's/_test$//' |
  grep -v '^$' | sort -u
