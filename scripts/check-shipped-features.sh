#!/usr/bin/env bash
# The server binary carries no test-only feature: tokio's `test-util` (the paused clock only the
# simulator, cluster/sim, may use) stays out of `revkv`. It could get in two ways:
#  1. a crate the binary depends on asks for it in a normal dependency; `cargo tree` of the
#     binary's package alone then shows it;
#  2. a script builds the binary with the whole workspace selected (`cargo build --bin revkv`
#     without `-p revkv`): cargo then unifies the features every member asks for, revkv-sim's
#     `test-util` included, into the one tokio it builds.
# Both are checked; `--self-test` first shows each check catching a planted case.
#
# usage: scripts/check-shipped-features.sh [--self-test]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Prints the test-only tokio features package $1 builds with, in its normal dependencies alone.
test_features_of() {
  cargo tree --quiet -p "$1" -e normal,build,features -i tokio |
    grep -o 'tokio feature "test-util"' | sort -u || true
}

# Prints every line of files $@ that builds or runs the revkv binary without selecting its
# package alone.
unselected_builds() {
  grep -nE 'cargo (build|run|install)[^#]*--bin revkv' "$@" | grep -vE -- '(-p|--package) revkv( |$)' || true
}

if [[ "${1:-}" == --self-test ]]; then
  if [[ -z "$(test_features_of revkv-sim)" ]]; then
    echo "check-shipped-features: self-test: revkv-sim's test-util was not seen" >&2
    exit 1
  fi
  planted=$(mktemp)
  printf '%s\n' 'cargo build --release --quiet --bin revkv' 'cargo build -p revkv --bin revkv' >"$planted"
  if [[ "$(unselected_builds "$planted" | wc -l)" != 1 ]]; then
    rm -f "$planted"
    echo "check-shipped-features: self-test: the planted workspace build was not caught alone" >&2
    exit 1
  fi
  rm -f "$planted"
  echo "check-shipped-features: self-test: a test-only feature and a workspace-wide build are caught"
fi

failed=false
if [[ -n "$(test_features_of revkv)" ]]; then
  echo "check-shipped-features: the revkv binary's dependencies turn on tokio's test-util:" >&2
  cargo tree --quiet -p revkv -e normal,build,features -i tokio >&2
  failed=true
fi
# The history in docs/BENCHMARKS.md and docs/benchmarks/ quotes old commands as they were run,
# and this file names the bad form in its header.
mapfile -t build_files < <(git ls-files 'scripts/*' '.ci/*' README.md 'docs/guide/*.md' |
  grep -v '^scripts/check-shipped-features.sh$')
builds=$(unselected_builds "${build_files[@]}")
if [[ -n "$builds" ]]; then
  echo "check-shipped-features: these build revkv with the whole workspace's features (add -p revkv):" >&2
  echo "$builds" >&2
  failed=true
fi
[[ "$failed" == false ]] || exit 1
echo "check-shipped-features: the revkv binary is built without test-only features"
