#!/usr/bin/env bash
# The revkv binary builds on a machine without protoc: README's quick start asks for cargo and curl
# only (issue 63, item 9). A system protoc could become necessary again in two ways:
#  1. a crate the binary depends on (a normal or a build dependency) compiles protos in its build
#     script with the machine's protoc, as the etcd-client crate's does (the tests may use it:
#     scripts/install-test-deps.sh installs protoc for them). `cargo tree` of the binary's package
#     alone shows such a crate: a direct dependent of a crate that drives protoc (prost-build,
#     tonic-build, ...) that does not also depend on protoc-bin-vendored, the protoc from
#     crates.io;
#  2. revkv-etcd-proto's build script, which compiles etcd's protos, stops finding its protoc and
#     protobuf's well-known types in protoc-bin-vendored. It is run here as cargo runs it, with a
#     fresh OUT_DIR, but with nothing in its environment: no PROTOC, no PROTOC_INCLUDE, and a PATH
#     with no protoc on it.
# Both are checked; `--self-test` first shows each check catching a planted case: the tests'
# etcd-client among revkv-grpc's dev-dependencies, and the build script told (PROTOC) to run a
# protoc from the PATH.
#
# usage: scripts/check-protoc-free-build.sh [--self-test]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The crates a build script calls to compile .proto files, each of which runs protoc: a crate that
# depends on one runs protoc when it is built.
protoc_drivers=(prost-build tonic-build tonic-prost-build protobuf-codegen protoc-rust)

# Prints the direct dependents of package $3 among the dependencies ($2 edges) of package $1.
dependents() {
  cargo tree --quiet -p "$1" -e "$2" -i "$3" --depth 1 --prefix none --format '{p}' |
    awk -v crate="$3" '$1 != crate { print $1 }'
}

# Prints the crates among the dependencies ($2 edges: normal,build or more) of package $1 whose
# build scripts compile protos with the machine's protoc.
protoc_from_the_machine() {
  local in_graph driver dependent
  in_graph=$(cargo tree --quiet -p "$1" -e "$2" --prefix none --format '{p}' | awk '{ print $1 }' | sort -u)
  # The drivers themselves, and the crates that give them the protoc from crates.io, are fine.
  local fine=("${protoc_drivers[@]}")
  if grep -qx protoc-bin-vendored <<<"$in_graph"; then
    mapfile -t -O "${#fine[@]}" fine < <(dependents "$1" "$2" protoc-bin-vendored)
  fi
  for driver in "${protoc_drivers[@]}"; do
    grep -qx "$driver" <<<"$in_graph" || continue
    while read -r dependent; do
      printf '%s\n' "${fine[@]}" | grep -qx "$dependent" || echo "$dependent"
    done < <(dependents "$1" "$2" "$driver")
  done | sort -u
}

# Builds revkv-etcd-proto's build script (check mode and the test suite's profile: scripts/test.sh's
# clippy and test runs reuse what this compiles) and prints its path.
build_script() {
  cargo check --quiet --profile release-tests -p revkv-etcd-proto --message-format=json-render-diagnostics |
    python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if (message.get("reason") == "compiler-artifact"
            and "revkv-etcd-proto" in message["package_id"]
            and message["target"]["kind"] == ["custom-build"]):
        print(message["filenames"][0])
'
}

# Runs build script $1 in its package's folder, as cargo would, into the fresh OUT_DIR $2, with
# only a PATH ($3, a folder without protoc) and the variables $4... in its environment.
run_build_script() {
  local script=$1 out_dir=$2 path=$3
  shift 3
  (cd node/grpc/proto && env -i PATH="$path" OUT_DIR="$out_dir" "$@" "$script")
}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/no-protoc"
script=$(build_script)
if [[ ! -x "$script" ]]; then
  echo "check-protoc-free-build: revkv-etcd-proto's build script was not found ('$script')" >&2
  exit 1
fi

if [[ "${1:-}" == --self-test ]]; then
  if ! protoc_from_the_machine revkv-grpc normal,build,dev | grep -qx etcd-client; then
    echo "check-protoc-free-build: self-test: the tests' etcd-client was not seen" >&2
    exit 1
  fi
  mkdir "$scratch/planted"
  if run_build_script "$script" "$scratch/planted" "$scratch/no-protoc" PROTOC=protoc \
    >"$scratch/planted.log" 2>&1; then
    echo "check-protoc-free-build: self-test: a build script run with no protoc to find passed" >&2
    exit 1
  fi
  if ! grep -q 'Could not find `protoc`' "$scratch/planted.log"; then
    echo "check-protoc-free-build: self-test: the planted build failed, but not for want of protoc:" >&2
    cat "$scratch/planted.log" >&2
    exit 1
  fi
  echo "check-protoc-free-build: self-test: a dependency's protoc and a build script's are caught"
fi

failed=false
from_the_machine=$(protoc_from_the_machine revkv normal,build)
if [[ -n "$from_the_machine" ]]; then
  echo "check-protoc-free-build: these dependencies of the revkv binary run the machine's protoc" \
    "in their build scripts (make them dev-dependencies, or give them protoc-bin-vendored):" >&2
  echo "$from_the_machine" >&2
  failed=true
fi
mkdir "$scratch/out"
if ! run_build_script "$script" "$scratch/out" "$scratch/no-protoc" >"$scratch/build.log" 2>&1; then
  echo "check-protoc-free-build: revkv-etcd-proto's build script fails without a system protoc:" >&2
  cat "$scratch/build.log" >&2
  failed=true
elif ! grep -q 'pub mod kv_client' "$scratch/out/etcdserverpb.rs" ||
  [[ ! -s "$scratch/out/etcdserverpb.serde.rs" ]]; then
  echo "check-protoc-free-build: revkv-etcd-proto's build script ran without a system protoc but" \
    "did not write etcd's clients and JSON mapping" >&2
  failed=true
fi
[[ "$failed" == false ]] || exit 1
echo "check-protoc-free-build: the revkv binary builds without a system protoc"
