#!/usr/bin/env bash
# Latency breakdown of single-client writes on the quick-start cluster: starts members 1-3 with
# the `revkv::write_path` trace events on (JSON logs), runs `revkv bench put --clients 1` at the
# leader, stops the cluster and prints where a write's time goes (scripts/write_path_latency.py).
# The events cost one log line each, so the total is somewhat above an untraced run's p50; the
# steps show where the time goes, not the untraced latency. docs/BENCHMARKS.md has a run.
#
# Settings: REVKV_BINARY (default target/release/revkv), WRITE_PATH_DURATION (default 4s).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
binary=${REVKV_BINARY:-$repo/target/release/revkv}
work_dir=$(mktemp -d "${TMPDIR:-/tmp}/revkv-write-path.XXXXXX")
export REVKV_BINARY=$binary REVKV_CLUSTER_DIR=$work_dir/cluster
export REVKV_CLUSTER_FLAGS="--log-format json"
export RUST_LOG="info,openraft=warn,revkv::write_path=trace"
cleanup() { "$repo/scripts/cluster.sh" down >/dev/null 2>&1 || true; rm -rf "$work_dir"; }
trap cleanup EXIT
"$repo/scripts/cluster.sh" up >/dev/null
leader=""
for _ in $(seq 100); do
  leader=$(curl -sf http://127.0.0.1:7001/v1/status |
    python3 -c 'import json, sys; print(json.load(sys.stdin).get("leader_id") or "")' || true)
  [[ -n "$leader" ]] && break
  sleep 0.1
done
[[ -n "$leader" ]] || { echo "no leader" >&2; exit 1; }
"$binary" bench put --clients 1 --duration "${WRITE_PATH_DURATION:-4s}" \
  --endpoints "http://127.0.0.1:700$leader" 2>/dev/null | grep -E "throughput|latency"
"$repo/scripts/cluster.sh" down >/dev/null
python3 "$repo/scripts/write_path_latency.py" "$work_dir"/cluster/member-*.log
