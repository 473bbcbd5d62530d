#!/usr/bin/env bash
# Runs the shell examples of README.md and of the user guides (docs/guide/*.md) as written, in
# order, each document on a new quick-start cluster, and compares each command's output with the
# output the document shows under it, so the docs cannot drift from the code. scripts/test.sh
# (and so CI) runs it.
#
#   scripts/check-doc-examples.sh              every document
#   scripts/check-doc-examples.sh FILE...      only these (paths from the repository root)
#   scripts/check-doc-examples.sh --self-test [FILE...]
#                                              first show the checker failing on a planted wrong
#                                              answer, then check
#
# The rule for writers: a line starting with `$ ` inside a code block is a command the check runs,
# and the lines under it (up to the next `$ ` or the block's end) are its expected output, where
# `<...>` matches anything (a raft term, a time, a lease id) and nothing else is loose. A code block
# without `$ ` prompts is not run: use it for what cannot run here (a command that holds until
# Ctrl-C, a second machine, an etcd of your own).
#
# The runner is byexample (PyPI, pinned, in the private tools environment of
# scripts/private-tools.sh): it feeds a document's commands to one bash session, so variables,
# `cd` and `eval "$(scripts/cluster.sh env)"` carry over from one example to the next.
#
# Each document runs in a scratch directory of its own that links to this checkout's scripts/, so
# `scripts/cluster.sh` works as written and every file a document writes (`.cluster/`, backups)
# is removed afterwards. README starts and stops its own cluster, as a newcomer does; for a guide,
# which assumes the quick-start cluster is up and `revkv` on PATH, this script starts one first
# (`scripts/cluster.sh up` and `eval "$(scripts/cluster.sh env)"`). The clusters use ports
# 7001-7004, 7101-7104 and 7201-7204, and README's Kubernetes 6443, 10257 and 10259, which must
# be free.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# shellcheck source=scripts/private-tools.sh
source "$root/scripts/private-tools.sh"
private_tools_install byexample "$revkv_byexample_version" >/dev/null
byexample=("$revkv_tools_venv/bin/byexample" --language shell --fail-fast --diff unified)

# A deadline for each example: a member that hangs fails the check instead of stalling it. The
# build happens before the first document (below), so no example waits for a compiler.
example_timeout_seconds=${REVKV_DOC_EXAMPLE_TIMEOUT:-60}

self_test() {
  local scratch
  scratch=$(mktemp -d)
  printf '```console\n$ echo "revision 2"\nrevision <...>\n```\n' >"$scratch/good.md"
  printf '```console\n$ echo "revision 2"\nrevision 3\n```\n' >"$scratch/planted.md"
  if ! "${byexample[@]}" --timeout 10 "$scratch/good.md" >/dev/null 2>&1; then
    echo "check-doc-examples: self-test: a matching example failed" >&2
    rm -rf "$scratch"
    exit 1
  fi
  if "${byexample[@]}" --timeout 10 "$scratch/planted.md" >/dev/null 2>&1; then
    echo "check-doc-examples: self-test: a planted wrong answer was not caught" >&2
    rm -rf "$scratch"
    exit 1
  fi
  rm -rf "$scratch"
  echo "check-doc-examples: self-test: a planted wrong answer is caught"
}

if [[ "${1:-}" == "--self-test" ]]; then
  self_test
  shift
fi
documents=("$@")
if ((${#documents[@]} == 0)); then
  documents=(README.md)
  for guide in docs/guide/*.md; do
    if grep -q '^\$ ' "$guide"; then documents+=("$guide"); fi
  done
fi

for port in 7001 7002 7003 7004 7101 7102 7103 7104 7201 7202 7203 7204 6443 10257 10259; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "check-doc-examples: 127.0.0.1:$port is in use; the docs' clusters need it (a cluster of scripts/cluster.sh still up?)" >&2
    exit 1
  fi
done

# The documents' commands must not pick up the caller's settings for revkv or etcdctl; where the
# private tools live (REVKV_TOOLS_DIR) is not such a setting, and stays.
while read -r name; do unset "$name"; done < <(env | sed -n 's/^\(REVKV_[A-Z_]*\|ETCDCTL_[A-Z_]*\)=.*/\1/p' |
  grep -v -x REVKV_TOOLS_DIR)

# Stops every member, Prometheus and Kubernetes component a document started under $1, wherever
# its cluster directory was (a document may start a second cluster, e.g. one restored from a
# backup).
stop_everything_under() {
  local pid_file
  while read -r pid_file; do
    kill -TERM "$(cat "$pid_file")" 2>/dev/null || true
  done < <(find "$1" -name 'member-*.pid' -o -name 'prometheus.pid' -o -name 'kube-*.pid' 2>/dev/null)
}

scratch_root=$(mktemp -d)
cleanup() {
  stop_everything_under "$scratch_root"
  rm -rf "$scratch_root"
}
trap cleanup EXIT

# The builds `scripts/cluster.sh up` would make, made first so that they need no example deadline:
# revkv, and Kubernetes' binaries for the documents that start it (`up --kubernetes`).
cargo build --profile quick --quiet -p revkv --bin revkv
if grep -q -e '--kubernetes' "${documents[@]}"; then scripts/go-tools.sh kubernetes-1.37 >/dev/null; fi

for document in "${documents[@]}"; do
  scratch="$scratch_root/$(basename "$document" .md)"
  mkdir -p "$scratch"
  ln -s "$root/scripts" "$scratch/scripts"
  (
    cd "$scratch"
    if [[ "$document" != README.md ]]; then
      scripts/cluster.sh up >/dev/null
      eval "$(scripts/cluster.sh env)"
    fi
    # TERM=dumb: the tools draw no progress lines (revkv_tools::cli::draws_progress), so the
    # output compared is the answers alone.
    TERM=dumb "${byexample[@]}" --timeout "$example_timeout_seconds" "$root/$document"
  )
  stop_everything_under "$scratch"
  # Wait until the ports are free again, so the next document's cluster can bind them.
  for port in 7001 7002 7003 7004; do
    deadline=$((SECONDS + 30))
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
      if ((SECONDS >= deadline)); then
        echo "check-doc-examples: 127.0.0.1:$port still in use after $document" >&2
        exit 1
      fi
      sleep 0.1
    done
  done
  echo "check-doc-examples: every example of $document answered as it shows"
done
