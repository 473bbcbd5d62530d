#!/usr/bin/env bash
# Builds the project's pinned Go tools (today's etcd, etcd's benchmark tool, Kubernetes' binaries
# and test binaries) from the Go module proxy into a private directory, once, and reuses them.
#
# Each tool set is a small wrapper module under cluster/go/NAME/ (go.mod and go.sum committed, so
# every build resolves the same versions) with a `binaries` file: one "NAME PACKAGE" line per
# binary. `go install module@version` refuses etcd and Kubernetes (their go.mod files carry
# replace directives, which Go ignores in a dependency), so the wrapper requires them instead.
#
# Everything goes under `$REVKV_TOOLS_DIR/go` (scripts/private-tools.sh: by default
# ~/.cache/revkv-tools/go), never on the user's PATH, and the Go module and build caches are the
# tools directory's own, so the user's ~/go and ~/.cache/go-build are left as they were:
#   go/mod/               GOMODCACHE (writable, so deleting the directory needs no chmod)
#   go/build-cache/       GOCACHE
#   go/NAME/              the binaries of tool set NAME, and a stamp of what they were built from
#
# usage: scripts/go-tools.sh NAME...       builds what is missing, prints each set's directory
#        source scripts/go-tools.sh; go_tools_build NAME; "$(go_tools_dir NAME)/etcd" ...
# Tool sets: etcd-3.6, etcd-3.7, etcd-benchmark, kine, kubernetes-1.37 (ls cluster/go).

go_tools_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/private-tools.sh
source "$go_tools_root/scripts/private-tools.sh"
go_tools_cache="$revkv_tools_dir/go"

# The directory that holds tool set $1's binaries.
go_tools_dir() {
  echo "$go_tools_cache/$1"
}

# Runs the go command with the private caches and a build that depends only on the wrapper's
# go.mod and go.sum: no toolchain switch, no change to go.mod, no cgo (etcd's releases are built
# without it too; GO_TOOLS_CGO=1 for a wrapper with a `cgo` file, below), no local paths in the
# binaries.
go_tools_go() {
  GOMODCACHE="$go_tools_cache/mod" GOCACHE="$go_tools_cache/build-cache" \
    GOFLAGS="-modcacherw -mod=readonly -trimpath" GOTOOLCHAIN=local CGO_ENABLED="${GO_TOOLS_CGO:-0}" \
    GOWORK=off go "$@"
}

# What a tool set was built from: its wrapper's files and the Go version. A change to any of them
# rebuilds the set.
go_tools_stamp() {
  local wrapper=$1
  {
    go version
    cat "$wrapper/go.mod" "$wrapper/go.sum" "$wrapper/binaries"
    if [[ -f "$wrapper/ldflags" ]]; then cat "$wrapper/ldflags"; fi
    if [[ -f "$wrapper/cgo" ]]; then cat "$wrapper/cgo"; fi
    if [[ -f "$wrapper/tags" ]]; then cat "$wrapper/tags"; fi
  } | sha256sum | cut -d' ' -f1
}

# Builds tool set $1 when its binaries are missing or were built from something else.
go_tools_build() {
  local name=$1
  local wrapper="$go_tools_root/cluster/go/$name"
  local target
  target=$(go_tools_dir "$name")
  if [[ ! -f "$wrapper/binaries" ]]; then
    echo "go-tools: no tool set '$name' (cluster/go/$name/binaries is missing)" >&2
    return 1
  fi
  if ! command -v go >/dev/null 2>&1; then
    echo "go-tools: the go command is missing (Go 1.26 or later; on Debian: apt-get install golang)" >&2
    return 1
  fi
  local stamp
  stamp=$(go_tools_stamp "$wrapper")
  if [[ -f "$target/.stamp" && "$(cat "$target/.stamp")" == "$stamp" ]]; then
    return 0
  fi
  local ldflags="" cgo=0 cgo_cflags=""
  if [[ -f "$wrapper/ldflags" ]]; then ldflags=$(tr '\n' ' ' <"$wrapper/ldflags"); fi
  # A wrapper with a `cgo` file is built with cgo (the machine's C compiler), that file giving
  # the C flags: kine on SQLite, as k3s builds it, links SQLite's C library.
  if [[ -f "$wrapper/cgo" ]]; then cgo=1; cgo_cflags=$(grep -v '^#' "$wrapper/cgo" | tr '\n' ' '); fi
  # A `tags` file names the build tags, one line, comma-separated (as the upstream build uses).
  local tags=""
  if [[ -f "$wrapper/tags" ]]; then tags=$(grep -v '^#' "$wrapper/tags" | tr -d '\n'); fi
  mkdir -p "$target"
  rm -f "$target/.stamp"
  local started=$SECONDS binary package
  while read -r binary package; do
    [[ -z "$binary" || "$binary" == \#* ]] && continue
    (cd "$wrapper" && GO_TOOLS_CGO=$cgo CGO_CFLAGS="$cgo_cflags" \
      go_tools_go build -ldflags "$ldflags" -tags "$tags" -o "$target/$binary" "$package") || {
      echo "go-tools: building $binary ($package) of $name failed" >&2
      return 1
    }
  done <"$wrapper/binaries"
  echo "$stamp" >"$target/.stamp"
  echo "go-tools: built $name in $((SECONDS - started)) s into $target" >&2
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  if [[ $# -eq 0 ]]; then
    echo "usage: scripts/go-tools.sh NAME... (tool sets: $(ls "$go_tools_root/cluster/go" | tr '\n' ' '))" >&2
    exit 2
  fi
  for name in "$@"; do
    go_tools_build "$name"
    go_tools_dir "$name"
  done
fi
