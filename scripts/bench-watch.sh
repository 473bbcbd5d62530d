#!/usr/bin/env bash
# Watch event delivery latency and member memory, revkv against etcd 3.4 and 3.5 on this machine.
#
#   scripts/bench-watch.sh
#
# For each system (one at a time) it starts the three-member cluster, then for each watcher count
# in REVKV_WATCH_COUNTS runs `revkv bench watch`: that many watches on one fresh prefix, all on
# member 1, one writer putting keys under the prefix through member 1 at REVKV_WATCH_WRITE_RATE
# writes per second for REVKV_WATCH_DURATION. Latency is from a write's acknowledgement to its
# event's arrival (hdrhistogram p50/p99). Member 1's resident memory is sampled before the
# watches open and every half second while they are open (the peak is kept).
#
# etcd is watched as its clients watch it: over gRPC Watch streams with the etcd-client crate
# (`--target etcd-grpc`), 100 watches to a stream (etcd's `benchmark watch --watch-per-stream`
# default, and how clientv3 multiplexes a process's watches) and the streams on one connection.
# revkv is watched the same way through its etcd gRPC port (revkv-grpc), and through its HTTP API
# (revkv: one NDJSON stream, so one connection, per watch, with the member's connection limits
# raised to the largest watcher count). etcd's JSON gateway can be added
# (etcd3.4-gateway): it runs a gRPC client per stream inside etcd, which is not etcd at its best.
#
# Settings (environment):
#   REVKV_WATCH_COUNTS       watcher counts (default "1 1000 10000")
#   REVKV_WATCH_WRITE_RATE   writes per second (default 10)
#   REVKV_WATCH_DURATION     writing time per run (default 10s)
#   REVKV_WATCH_SYSTEMS      systems to run (default "revkv revkv-grpc etcd3.4-grpc etcd3.5-grpc")
#   REVKV_WATCH_RESULTS_DIR  JSON reports and summary (default target/bench-watch)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
counts=${REVKV_WATCH_COUNTS:-1 1000 10000}
write_rate=${REVKV_WATCH_WRITE_RATE:-10}
duration=${REVKV_WATCH_DURATION:-10s}
systems=${REVKV_WATCH_SYSTEMS:-revkv revkv-grpc etcd3.4-grpc etcd3.5-grpc}
results_dir=${REVKV_WATCH_RESULTS_DIR:-$repo/target/bench-watch}
most_watchers=$(tr ' ' '\n' <<<"$counts" | sort -n | tail -n 1)
# The release binary, which scripts/bench-lib.sh has scripts/cluster.sh run (REVKV_PROFILE=release).
binary="$repo/target/release/revkv"

work_dir=$(mktemp -d "${TMPDIR:-/tmp}/revkv-bench-watch.XXXXXX")
# shellcheck source=scripts/bench-lib.sh
source "$repo/scripts/bench-lib.sh"

cleanup() {
  local status=$?
  trap - EXIT
  stop_cluster >/dev/null 2>&1 || true
  rm -rf "$work_dir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT

# Peak resident memory (KiB) of a process, sampled every half second until the file $2 appears.
sample_peak_rss() {
  local pid=$1 stop_file=$2 peak=0 rss
  while [[ ! -f "$stop_file" ]]; do
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    ((rss > peak)) && peak=$rss
    sleep 0.5
  done
  echo "$peak"
}

# Runs every watcher count against member 1 of the cluster that is up: $1 names the system in
# the results, $2 is the bench target, $3 member 1's URL and $4 its process id.
run_counts() {
  local system=$1 target=$2 endpoint=$3 pid=$4 count idle peak stop_file sampler
  for count in $counts; do
    idle=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    stop_file="$work_dir/stop-$system-$count"
    sample_peak_rss "$pid" "$stop_file" >"$work_dir/peak-$system-$count" &
    sampler=$!
    echo "== $system, $count watchers: revkv bench watch --target $target --endpoints $endpoint --watchers $count --write-rate $write_rate --duration $duration"
    "$binary" bench watch --target "$target" --endpoints "$endpoint" --watchers "$count" \
      --write-rate "$write_rate" --duration "$duration" -o json >"$results_dir/$system-$count.json"
    touch "$stop_file"
    wait "$sampler"
    peak=$(cat "$work_dir/peak-$system-$count")
    python3 - "$results_dir/$system-$count.json" "$idle" "$peak" <<'PYTHON'
import json, sys
path, idle, peak = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
report = json.load(open(path))
report["member_rss_idle_kib"], report["member_rss_peak_kib"] = idle, peak
json.dump(report, open(path, "w"), indent=2)
l = report["latency"]
print(f"   events {report['events_received']}/{report['events_expected']}, "
      f"p50 {l['p50_us'] / 1000:.2f} ms, p99 {l['p99_us'] / 1000:.2f} ms, "
      f"member 1 RSS {idle / 1024:.0f} -> {peak / 1024:.0f} MiB")
PYTHON
  done
}

run_system() {
  local system=$1
  case "$system" in
    # One connection per HTTP watch, all from 127.0.0.1: revkv's defaults (1,024 connections per
    # client address, 4,096 in all) would close the rest, so the limits are raised to fit.
    revkv)
      REVKV_MAX_CONNECTIONS_PER_CLIENT=$((most_watchers + 64)) \
        REVKV_MAX_CLIENT_CONNECTIONS=$((most_watchers + 64)) start_revkv
      run_counts revkv revkv http://127.0.0.1:7001 "${member_pids[0]}" ;;
    revkv-grpc) start_revkv; run_counts revkv-grpc etcd-grpc http://127.0.0.1:7201 "${member_pids[0]}" ;;
    etcd3.4-grpc) start_etcd 3.4; run_counts "$system" etcd-grpc http://127.0.0.1:12379 "${member_pids[0]}" ;;
    etcd3.5-grpc) start_etcd 3.5; run_counts "$system" etcd-grpc http://127.0.0.1:12379 "${member_pids[0]}" ;;
    etcd3.4-gateway) start_etcd 3.4; run_counts "$system" etcd http://127.0.0.1:12379 "${member_pids[0]}" ;;
    *) echo "bench-watch: unknown system $system" >&2; exit 2 ;;
  esac
  stop_cluster
}

install_etcd_if_absent
unset CARGO_TARGET_DIR
(cd "$repo" && cargo build --release --quiet -p revkv --bin revkv)
mkdir -p "$results_dir"
echo "== machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(uname -r), $(date -u '+%Y-%m-%d %H:%M UTC'), revkv $(git -C "$repo" rev-parse --short HEAD)"
for system in $systems; do run_system "$system"; done

python3 - "$results_dir" "$systems" $counts <<'PYTHON'
import json, os, sys
results_dir, systems, counts = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
print("| watchers | system | events received | p50 ms | p99 ms | member RSS idle -> peak MiB |")
print("|---|---|---|---|---|---|")
for count in counts:
    for system in systems:
        path = os.path.join(results_dir, f"{system}-{count}.json")
        if not os.path.exists(path):
            continue
        r = json.load(open(path))
        l = r["latency"]
        print(f"| {count} | {system} | {r['events_received']}/{r['events_expected']} | "
              f"{l['p50_us'] / 1000:.2f} | {l['p99_us'] / 1000:.2f} | "
              f"{r['member_rss_idle_kib'] / 1024:.0f} -> {r['member_rss_peak_kib'] / 1024:.0f} |")
PYTHON
