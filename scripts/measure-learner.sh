#!/usr/bin/env bash
# Measures adding a learner to a cluster that holds many keys (issue 14): three members on
# 127.0.0.1:76x1-76x3 filled with KEYS distinct keys of 256-byte values through `revkv bench
# put`, then a fourth member started with `--join`, added as a learner with `revkv ctl member
# add`, and timed until it has applied the leader's revision. Prints the time and every member's
# RSS, sampled every 0.2 s from /proc, before and at its peak. Not part of the test suite: it
# takes minutes.
#
#   scripts/measure-learner.sh [KEYS]     (default 1000000; extra serve flags in REVKV_SERVE_FLAGS)
set -euo pipefail
cd "$(dirname "$0")/.."
keys=${1:-1000000}
binary=${REVKV_BINARY:-target/release/revkv}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

peers="1=http://127.0.0.1:7611,2=http://127.0.0.1:7612,3=http://127.0.0.1:7613"
declare -A pids
serve() {
  local id=$1
  shift
  "$binary" serve --id "$id" --data-dir "$work/member-$id" \
    --listen-client "127.0.0.1:760$id" --listen-peer "127.0.0.1:761$id" ${REVKV_SERVE_FLAGS:-} "$@" \
    >"$work/member-$id.log" 2>&1 &
  pids[$id]=$!
}
wait_ready() {
  for _ in $(seq 600); do
    curl -sf "$1/healthz" >/dev/null && return 0
    sleep 0.1
  done
  echo "$1 never answered" >&2
  exit 1
}
rss_mib() { awk '/VmRSS/ {printf "%d", $2 / 1024}' "/proc/$1/status"; }
revision_of() { curl -sf "http://127.0.0.1:760$1/v1/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["revision"])'; }

for id in 1 2 3; do serve "$id" --initial-cluster "$peers"; done
for id in 1 2 3; do wait_ready "http://127.0.0.1:760$id"; done
started_fill=$(date +%s)
"$binary" bench put --endpoints http://127.0.0.1:7601,http://127.0.0.1:7602,http://127.0.0.1:7603 \
  --clients 64 --total "$keys" --value-size 256 --duration 60m >"$work/fill.txt"
target=$(revision_of 1)
echo "filled $keys keys in $(( $(date +%s) - started_fill )) s: revision $target"

declare -A before peak
for id in 1 2 3; do before[$id]=$(rss_mib "${pids[$id]}"); peak[$id]=${before[$id]}; done
started=$(date +%s.%N)
serve 4 --join
wait_ready "http://127.0.0.1:7604"
before[4]=$(rss_mib "${pids[4]}")
peak[4]=${before[4]}
REVKV_ENDPOINTS=http://127.0.0.1:7601 "$binary" ctl --timeout 60m member add 4 \
  --peer-url http://127.0.0.1:7614 --client-url http://127.0.0.1:7604 >"$work/add.txt" 2>&1 &
until [[ "$(revision_of 4 2>/dev/null || echo 0)" -ge "$target" ]]; do
  for id in 1 2 3 4; do
    rss=$(rss_mib "${pids[$id]}" 2>/dev/null || echo 0)
    (( rss > peak[$id] )) && peak[$id]=$rss
  done
  sleep 0.2
done
elapsed=$(python3 -c "import time; print(f'{time.time() - $started:.1f}')")
echo "learner 4 applied revision $target ${elapsed} s after it started"
for id in 1 2 3 4; do
  echo "member $id: RSS before ${before[$id]} MiB, peak ${peak[$id]} MiB"
done
