#!/usr/bin/env bash
# Whether this machine can build revkv: its build compiles etcd's protobuf definitions with protoc
# (the etcd-client crate's build script and revkv-grpc's both run it), and those import protobuf's
# well-known types (google/protobuf/descriptor.proto), which Debian ships apart from the compiler
# (libprotobuf-dev, a recommendation of protobuf-compiler that a --no-install-recommends install
# leaves out). Exits 0 when both are there; otherwise says exactly what to install and exits 1, so
# `scripts/cluster.sh up` stops before a build that would fail deep in a dependency's build script.
#
#   scripts/check-protoc.sh              check (PROTOC names the compiler, as for the build)
#   scripts/check-protoc.sh --self-test  first show the check refusing a missing compiler and one
#                                        without the well-known types, then check
set -euo pipefail

install_hint() {
  cat >&2 <<'HINT'
revkv's build compiles etcd's protobuf definitions with protoc and protobuf's well-known types
(google/protobuf/*.proto). Install both, then run the command again:
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
    echo "cannot build revkv: there is no protoc at '$protoc'" >&2
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
    echo "cannot build revkv: $protoc cannot find protobuf's well-known types:" \
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
  # The quick start stops there too, before it builds or starts anything.
  if refusal=$(PROTOC="$scratch/protoc" REVKV_CLUSTER_DIR="$scratch/cluster" \
    "$(dirname "$0")/cluster.sh" up 2>&1); then
    echo "check-protoc: cluster.sh up went on without a usable protoc" >&2
    return 1
  fi
  grep -q "sudo apt install protobuf-compiler libprotobuf-dev" <<<"$refusal"
  if [[ -e "$scratch/cluster/member-1" ]]; then
    echo "check-protoc: cluster.sh up started a member without a usable protoc" >&2
    return 1
  fi
  rm -rf "$scratch"
  echo "check-protoc: the self-test saw a missing protoc and one without well-known types refused"
}

if [[ "${1:-}" == "--self-test" ]]; then self_test; fi
check
echo "check-protoc: protoc and protobuf's well-known types are there"
