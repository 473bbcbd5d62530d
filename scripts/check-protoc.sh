#!/usr/bin/env bash
# Whether this machine can build revkv's tests: the etcd-client crate, which tests in node/grpc and
# node/bin drive revkv and etcd with (a dev-dependency), compiles etcd's protobuf definitions in its
# build script with the machine's protoc, and those import protobuf's well-known types
# (google/protobuf/descriptor.proto), which Debian ships apart from the compiler (libprotobuf-dev,
# a recommendation of protobuf-compiler that a --no-install-recommends install leaves out). Exits 0
# when both are there; otherwise says exactly what to install and exits 1, so scripts/test.sh stops
# before a build that would fail deep in a dependency's build script.
#
# Building and running revkv itself needs neither (its own protos are compiled with a protoc from
# crates.io, scripts/check-protoc-free-build.sh), so `scripts/cluster.sh up` does not run this.
#
#   scripts/check-protoc.sh              check (PROTOC names the compiler, as for the build)
#   scripts/check-protoc.sh --self-test  first show the check refusing a missing compiler and one
#                                        without the well-known types, then check
set -euo pipefail

install_hint() {
  cat >&2 <<'HINT'
revkv's tests build the etcd-client crate, which compiles etcd's protobuf definitions with protoc
and protobuf's well-known types (google/protobuf/*.proto). Install both, then run the command
again (building and running revkv alone needs neither):
  Debian or Ubuntu: sudo apt install protobuf-compiler libprotobuf-dev
  Fedora:           sudo dnf install protobuf-compiler protobuf-devel
  macOS:            brew install protobuf
or set PROTOC to a protoc that finds them (PROTOC_INCLUDE may name their directory).
HINT
}

# Checks the protoc named by PROTOC (or `protoc` on PATH); prints why not and the hint on failure.
check() {
  local protoc=${PROTOC:-protoc}
  if ! command -v "$protoc" >/dev/null 2>&1; then
    echo "cannot build revkv's tests: there is no protoc at '$protoc'" >&2
    install_hint
    return 1
  fi
  local scratch
  scratch=$(mktemp -d)
  printf 'syntax = "proto3";\nimport "google/protobuf/descriptor.proto";\n' >"$scratch/probe.proto"
  local include=()
  if [[ -n "${PROTOC_INCLUDE:-}" ]]; then include=(-I "$PROTOC_INCLUDE"); fi
  if ! "$protoc" -I "$scratch" "${include[@]}" -o "$scratch/probe.pb" "$scratch/probe.proto" \
    2>"$scratch/error"; then
    echo "cannot build revkv's tests: $protoc cannot find protobuf's well-known types:" \
      "$(head -n 1 "$scratch/error")" >&2
    rm -rf "$scratch"
    install_hint
    return 1
  fi
  rm -rf "$scratch"
}

self_test() {
  local scratch refusal
  scratch=$(mktemp -d)
  # A compiler that is not there.
  if refusal=$(PROTOC="$scratch/no-such-protoc" check 2>&1); then
    echo "check-protoc: the self-test's missing protoc was accepted" >&2
    return 1
  fi
  grep -q "sudo apt install protobuf-compiler libprotobuf-dev" <<<"$refusal"
  # A compiler without the well-known types, as Debian's protobuf-compiler without its
  # recommendations answers.
  cat >"$scratch/protoc" <<'FAKE'
#!/usr/bin/env bash
echo "google/protobuf/descriptor.proto: File not found." >&2
exit 1
FAKE
  chmod +x "$scratch/protoc"
  if refusal=$(PROTOC="$scratch/protoc" check 2>&1); then
    echo "check-protoc: the self-test's protoc without well-known types was accepted" >&2
    return 1
  fi
  grep -q "descriptor.proto: File not found" <<<"$refusal"
  rm -rf "$scratch"
  echo "check-protoc: the self-test saw a missing protoc and one without well-known types refused"
}

if [[ "${1:-}" == "--self-test" ]]; then self_test; fi
check
echo "check-protoc: protoc and protobuf's well-known types are there"
