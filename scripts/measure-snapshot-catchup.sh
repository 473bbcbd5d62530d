#!/usr/bin/env bash
# Measures a follower catching up from a raft snapshot of a large store (issue 14): three members
# on 127.0.0.1:74x1-74x3, member 3 stopped, the leader's store filled to about SIZE_MIB MiB
# (1 MiB values, so the snapshot is what moves, not the log; the state file ends up several times
# the values' size, see docs/BENCHMARKS.md), member 3 started again. Prints the
# catch-up time and each member's RSS before and its peak during the catch-up, sampled every
# 0.2 s from /proc. Not part of the test suite: it takes minutes and several GiB of disk.
#
#   scripts/measure-snapshot-catchup.sh [SIZE_MIB]     (default 2048)
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-2048}
binary=${REVKV_BINARY:-target/release/revkv}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

peers="1=http://127.0.0.1:7511,2=http://127.0.0.1:7512,3=http://127.0.0.1:7513"
declare -A pids
start() {
  local id=$1
  RUST_LOG="info,openraft=warn,openraft::core::sm::worker=info" "$binary" serve --id "$id" --data-dir "$work/member-$id" \
    --listen-client "127.0.0.1:741$id" --listen-peer "127.0.0.1:751$id" \
    --initial-cluster "$peers" --snapshot-entries 200 --snapshot-keep-entries 20 \
    --quota-backend-bytes 17179869184 \
    >"$work/member-$id.log" 2>&1 &
  pids[$id]=$!
}
wait_ready() {
  local url=$1
  for _ in $(seq 600); do
    curl -sf "$url/readyz" >/dev/null && return 0
    sleep 0.1
  done
  echo "$url never became ready" >&2
  exit 1
}
rss_mib() { local kib; kib=$(ps -o rss= -p "$1" 2>/dev/null | tr -d ' '); echo $(( ${kib:-0} / 1024 )); }
revision_of() { curl -sf -m 60 "http://127.0.0.1:741$1/v1/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["revision"])'; }

for id in 1 2 3; do start "$id"; done
for id in 1 2 3; do wait_ready "http://127.0.0.1:741$id"; done
kill "${pids[3]}"
wait "${pids[3]}" 2>/dev/null || true

"$binary" bench put --endpoints http://127.0.0.1:7411,http://127.0.0.1:7412 \
  --clients 4 --total "$size_mib" --value-size 1048576 --duration 30m >"$work/fill.txt"
target=$(revision_of 1)
state_mib=$(( $(stat -c %s "$work/member-1/state.redb") / 1024 / 1024 ))
echo "filled: revision $target, member 1's state file $state_mib MiB"

declare -A before
for id in 1 2; do before[$id]=$(rss_mib "${pids[$id]}"); done
before[3]=0
started=$(date +%s.%N)
start 3
# Sampled apart from the catch-up check, which a member busy installing answers late.
(
  while true; do
    for id in 1 2 3; do echo "$id $(rss_mib "${pids[$id]}")"; done
    sleep 0.2
  done
) >"$work/rss.txt" &
sampler=$!
until [[ "$(revision_of 3 2>/dev/null || echo 0)" -ge "$target" ]]; do
  sleep 0.2
done
kill "$sampler"
elapsed=$(python3 -c "import time; print(f'{time.time() - $started:.1f}')")
installed=$(grep -c "Done install complete snapshot" "$work/member-3.log" || true)
samples=$(grep -c '^3 ' "$work/rss.txt" || true)
echo "member 3 caught up to revision $target in $elapsed s (snapshot installs logged: $installed; $samples memory samples)"
for id in 1 2 3; do
  peak=$(awk -v id="$id" '$1 == id && $2 > peak {peak = $2} END {print peak + 0}' "$work/rss.txt")
  echo "member $id: RSS before ${before[$id]} MiB, peak during catch-up $peak MiB"
done
