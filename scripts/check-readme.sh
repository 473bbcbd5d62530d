#!/usr/bin/env bash
# Runs README.md's shell examples as written, in order, on a new quick-start cluster, and compares
# each command's output with the output README shows under it, so README cannot drift from the
# code. scripts/test.sh (and so CI) runs it.
#
#   scripts/check-readme.sh              the check
#   scripts/check-readme.sh --self-test  first show the checker failing on a planted wrong answer
#
# The runner is byexample (PyPI, pinned, in the private tools environment of
# scripts/private-tools.sh): it feeds every `$ ` line of README's code blocks to one bash session,
# so variables and `eval "$(scripts/cluster.sh env)"` carry over from one example to the next, and
# compares the output with the lines below the command, where `<...>` matches anything (a raft
# term, a time) and `<BLANKLINE>` an empty line. Code blocks without a `$ ` prompt are not run.
#
# The cluster is README's own: `scripts/cluster.sh up` on ports 7001-7003, 7101-7103 and
# 7201-7203, which must be free, with its data in a scratch directory that is removed afterwards.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# shellcheck source=scripts/private-tools.sh
source "$root/scripts/private-tools.sh"
private_tools_install byexample "$revkv_byexample_version" >/dev/null
byexample=("$revkv_tools_venv/bin/byexample" --language shell --fail-fast --diff unified)

# A deadline for each example: a member that hangs fails the check instead of stalling it. The
# build happens before byexample starts (below), so no example waits for a compiler.
example_timeout_seconds=${REVKV_README_EXAMPLE_TIMEOUT:-60}

self_test() {
  local scratch
  scratch=$(mktemp -d)
  printf '```console\n$ echo "revision 2"\nrevision <...>\n```\n' >"$scratch/good.md"
  printf '```console\n$ echo "revision 2"\nrevision 3\n```\n' >"$scratch/planted.md"
  if ! "${byexample[@]}" --timeout 10 "$scratch/good.md" >/dev/null 2>&1; then
    echo "check-readme: self-test: a matching example failed" >&2
    rm -rf "$scratch"
    exit 1
  fi
  if "${byexample[@]}" --timeout 10 "$scratch/planted.md" >/dev/null 2>&1; then
    echo "check-readme: self-test: a planted wrong answer was not caught" >&2
    rm -rf "$scratch"
    exit 1
  fi
  rm -rf "$scratch"
  echo "check-readme: self-test: a planted wrong answer is caught"
}

if [[ "${1:-}" == "--self-test" ]]; then self_test; fi

for port in 7001 7002 7003 7101 7102 7103 7201 7202 7203; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "check-readme: 127.0.0.1:$port is in use; README's cluster needs it (a cluster of scripts/cluster.sh still up?)" >&2
    exit 1
  fi
done

scratch=$(mktemp -d)
export REVKV_CLUSTER_DIR="$scratch/cluster"
stop_cluster() {
  scripts/cluster.sh down >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap stop_cluster EXIT
# README's commands must not pick up the caller's settings for revkv ctl or etcdctl.
while read -r name; do unset "$name"; done < <(env | sed -n 's/^\(REVKV_[A-Z_]*\|ETCDCTL_[A-Z_]*\)=.*/\1/p' | grep -v '^REVKV_CLUSTER_DIR$\|^REVKV_TOOLS_DIR$')

# The build `scripts/cluster.sh up` would make, made first so that it needs no example deadline.
cargo build --profile "${REVKV_PROFILE:-quick}" --quiet --bin revkv

"${byexample[@]}" --timeout "$example_timeout_seconds" README.md
echo "check-readme: every example of README.md answered as README shows"
