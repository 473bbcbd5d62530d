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
export REVKV_BINARY=$binary
export REVKV_CLUSTER_FLAGS="--log-format json"
export RUST_LOG="info,openraft=warn,revkv::write_path=trace"
# shellcheck source=scripts/bench-lib.sh
source "$repo/scripts/bench-lib.sh"
cleanup() { stop_cluster; rm -rf "$work_dir"; }
trap cleanup EXIT
start_revkv >/dev/null
"$binary" bench put --clients 1 --duration "${WRITE_PATH_DURATION:-4s}" \
  --endpoints "$leader_endpoint" 2>/dev/null | grep -E "throughput|latency"
logs=("$work_dir"/revkv/member-*.log)
python3 "$repo/scripts/write_path_latency.py" "${logs[@]}"
