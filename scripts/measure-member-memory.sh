#!/usr/bin/env bash
# Where a member's memory stands after a standard load: a three-member cluster of BINARY (default:
# the release build), 600,000 distinct keys written through the leader's etcd gRPC port with the
# benchmark's settings (`revkv bench put --target etcd-grpc --clients 64 --conns 8`, six runs of
# 100,000), then each member's RSS, redb's count of its cache and what jemalloc has allocated.
# Compare two builds by running it for each, one after the other, on an otherwise idle machine.
#
#   scripts/measure-member-memory.sh [BINARY]
#
# Uses the quick-start ports (scripts/cluster.sh), which must be free; the data goes to a scratch
# directory that is removed afterwards.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
binary=${1:-$root/target/release/revkv}
if [[ ! -x "$binary" ]]; then
  echo "measure-member-memory: $binary is not an executable (build it: cargo build --release -p revkv --bin revkv)" >&2
  exit 2
fi
scratch=$(mktemp -d)
export REVKV_CLUSTER_DIR="$scratch" REVKV_BINARY="$binary"
trap '"$root/scripts/cluster.sh" down >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
"$root/scripts/cluster.sh" up >/dev/null

status_field() {
  curl -s "http://127.0.0.1:700$1/v1/status" |
    python3 -c "import json, sys; print(json.load(sys.stdin)[sys.argv[1]])" "$2"
}
leader=$(status_field 1 leader_id)
for _ in 1 2 3 4 5 6; do
  "$binary" bench put --target etcd-grpc --endpoints "http://127.0.0.1:720$leader" \
    --clients 64 --conns 8 --total 100000 >/dev/null 2>&1
done

metric() { curl -s "http://127.0.0.1:700$1/metrics" | awk -v name="$2" '$1 == name { print $2 }'; }
echo "binary $binary"
echo "revision $(status_field 1 revision), state file $(status_field 1 state_db_bytes) bytes"
printf '%-7s %-10s %-18s %-18s\n' MEMBER RSS_MB STATE_CACHE_MB JEMALLOC_ALLOC_MB
for id in 1 2 3; do
  rss_kb=$(ps -o rss= -p "$(cat "$scratch/member-$id.pid")")
  cache=$(metric "$id" 'revkv_memory_bytes{part="state_cache"}')
  allocated=$(metric "$id" 'revkv_allocator_bytes{stat="allocated"}')
  awk -v id="$id" -v rss_kb="$rss_kb" -v cache="$cache" -v allocated="$allocated" \
    'BEGIN { printf "%-7s %-10.1f %-18.1f %-18.1f\n", id, rss_kb / 1000, cache / 1e6, allocated / 1e6 }'
done
