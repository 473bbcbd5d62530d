#!/usr/bin/env bash
# Watch event delivery latency and member memory, revkv against etcd 3.4 on this machine.
#
#   scripts/bench-watch.sh
#
# For each system (revkv, then etcd; never both at once) it starts the three-member cluster, then
# for each watcher count in REVKV_WATCH_COUNTS runs `revkv bench watch`: that many streams on one
# fresh prefix, all on member 1, one writer putting keys under the prefix through member 1 at
# REVKV_WATCH_WRITE_RATE writes per second for REVKV_WATCH_DURATION. Latency is from a write's
# acknowledgement to its event's arrival (hdrhistogram p50/p99). Member 1's resident memory is
# sampled before the streams open and every half second while they are open (the peak is kept).
#
# etcd is watched through its v3 JSON gateway (`POST /v3/watch`), which runs inside the etcd
# process, so its memory includes the gateway's per-stream gRPC plumbing.
#
# Settings (environment):
#   REVKV_WATCH_COUNTS       watcher counts (default "1 1000 10000")
#   REVKV_WATCH_WRITE_RATE   writes per second (default 10)
#   REVKV_WATCH_DURATION     writing time per run (default 10s)
#   REVKV_WATCH_SYSTEMS      systems to run (default "revkv etcd")
#   REVKV_WATCH_RESULTS_DIR  JSON reports and summary (default target/bench-watch)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
etcd_anchor="$repo/../shared/anchors/etcd-cluster.sh"
counts=${REVKV_WATCH_COUNTS:-1 1000 10000}
write_rate=${REVKV_WATCH_WRITE_RATE:-10}
duration=${REVKV_WATCH_DURATION:-10s}
systems=${REVKV_WATCH_SYSTEMS:-revkv etcd}
results_dir=${REVKV_WATCH_RESULTS_DIR:-$repo/target/bench-watch}
# The same binary scripts/cluster.sh runs: from CARGO_TARGET_DIR when set, else target/.
binary="${CARGO_TARGET_DIR:-$repo/target}/release/revkv"

work_dir=$(mktemp -d "${TMPDIR:-/tmp}/revkv-bench-watch.XXXXXX")
running=""

cleanup() {
  local status=$?
  trap - EXIT
  case "$running" in
    revkv) REVKV_CLUSTER_DIR="$work_dir/revkv" "$repo/scripts/cluster.sh" down >/dev/null 2>&1 || true ;;
    etcd) bash "$etcd_anchor" stop "$work_dir/etcd" >/dev/null 2>&1 || true ;;
  esac
  rm -rf "$work_dir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT

if ! command -v etcd >/dev/null 2>&1 && [[ "$systems" == *etcd* ]]; then
  echo "== installing etcd-server and etcd-client (apt-get)"
  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server etcd-client
fi

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

run_counts() {
  local system=$1 endpoint=$2 pid=$3 count idle peak stop_file sampler
  for count in $counts; do
    idle=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    stop_file="$work_dir/stop-$system-$count"
    sample_peak_rss "$pid" "$stop_file" >"$work_dir/peak-$system-$count" &
    sampler=$!
    echo "== $system, $count watchers: revkv bench watch --watchers $count --write-rate $write_rate --duration $duration"
    "$binary" bench watch --target "$system" --endpoints "$endpoint" --watchers "$count" \
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

run_revkv() {
  running=revkv
  REVKV_CLUSTER_DIR="$work_dir/revkv" "$repo/scripts/cluster.sh" up
  run_counts revkv http://127.0.0.1:7001 "$(cat "$work_dir/revkv/member-1.pid")"
  REVKV_CLUSTER_DIR="$work_dir/revkv" "$repo/scripts/cluster.sh" down
  running=""
}

run_etcd() {
  running=etcd
  bash "$etcd_anchor" start "$work_dir/etcd"
  run_counts etcd http://127.0.0.1:12379 "$(cat "$work_dir/etcd/e1.pid")"
  bash "$etcd_anchor" stop "$work_dir/etcd"
  running=""
}

(cd "$repo" && cargo build --release --quiet --bin revkv)
mkdir -p "$results_dir"
echo "== machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(uname -r)"
echo "== $(etcd --version 2>/dev/null | head -n 1)"
for system in $systems; do
  case "$system" in
    revkv) run_revkv ;;
    etcd) run_etcd ;;
    *) echo "bench-watch: unknown system $system" >&2; exit 2 ;;
  esac
done

python3 - "$results_dir" $counts <<'PYTHON'
import json, os, sys
results_dir, counts = sys.argv[1], sys.argv[2:]
print("| watchers | system | events received | p50 ms | p99 ms | member RSS idle -> peak MiB |")
print("|---|---|---|---|---|---|")
for count in counts:
    for system in ("revkv", "etcd"):
        path = os.path.join(results_dir, f"{system}-{count}.json")
        if not os.path.exists(path):
            continue
        r = json.load(open(path))
        l = r["latency"]
        print(f"| {count} | {system} | {r['events_received']}/{r['events_expected']} | "
              f"{l['p50_us'] / 1000:.2f} | {l['p99_us'] / 1000:.2f} | "
              f"{r['member_rss_idle_kib'] / 1024:.0f} -> {r['member_rss_peak_kib'] / 1024:.0f} |")
PYTHON
