#!/usr/bin/env bash
# A/B of two revkv binaries on this machine: starts three members from one binary (client ports
# 7001-7003, peer ports 7101-7103, data in a temporary directory), runs workloads at the leader,
# prints throughput, latency and the members' CPU per operation (user + system from /proc), their
# RSS, and stops them. Run it for each binary in turn, alternating, to compare two builds in the
# same minutes (docs/BENCHMARKS.md, "What each step did").
#
#   scripts/bench-ab.sh BINARY LABEL [WORKLOAD...]     workloads: put-1 put-64 put-256 lin-64 ser-64
#
# Settings: AB_DURATION (default 8s), AB_FLAGS (extra `revkv serve` flags).
set -uo pipefail
binary=${1:?binary}; label=${2:?label}; shift 2
workloads=("${@:-put-1 put-64}")
repo=$(cd "$(dirname "$0")/.." && pwd)
work_dir=$(mktemp -d "${TMPDIR:-/tmp}/revkv-ab.XXXXXX")
dir=$work_dir
# shellcheck source=scripts/bench-lib.sh
source "$repo/scripts/bench-lib.sh"
initial_cluster="1=http://127.0.0.1:7101,2=http://127.0.0.1:7102,3=http://127.0.0.1:7103"
cleanup() { for pid in "${member_pids[@]}"; do kill "$pid" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
for id in 1 2 3; do
  # shellcheck disable=SC2086 # AB_FLAGS is a list of flags on purpose
  "$binary" serve --id "$id" --data-dir "$dir/m$id" --listen-client "127.0.0.1:700$id" \
    --listen-peer "127.0.0.1:710$id" --initial-cluster "$initial_cluster" ${AB_FLAGS:-} \
    >"$dir/m$id.log" 2>&1 &
  member_pids+=($!)
done
leader=""
for _ in $(seq 200); do
  leader=$(curl -sf http://127.0.0.1:7001/v1/status 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin).get("leader_id") or "")' 2>/dev/null)
  [[ -n "$leader" ]] && break
  sleep 0.1
done
[[ -n "$leader" ]] || { echo "bench-ab: no leader; see $dir" >&2; exit 1; }
for workload in ${workloads[*]}; do
  case $workload in
    put-1) arguments="put --clients 1" ;; put-64) arguments="put --clients 64" ;;
    put-256) arguments="put --clients 256" ;;
    lin-64) arguments="get --consistency linearizable --keys 1000 --clients 64" ;;
    ser-64) arguments="get --consistency serializable --keys 1000 --clients 64" ;;
    *) echo "bench-ab: unknown workload $workload" >&2; exit 2 ;;
  esac
  sync; sleep 1
  before=$(members_cpu_ticks)
  # shellcheck disable=SC2086 # the arguments are a list of words on purpose
  "$binary" bench $arguments --value-size 256 --endpoints "http://127.0.0.1:700$leader" \
    --duration "${AB_DURATION:-8s}" -o json 2>/dev/null >"$dir/$workload.json"
  after=$(members_cpu_ticks)
  python3 - "$dir/$workload.json" "$label" "$workload" $((after - before)) "$(getconf CLK_TCK)" <<'PYTHON'
import json, sys
report, label, workload = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
ticks, hertz = int(sys.argv[4]), int(sys.argv[5])
latency = report["latency"]
cpu = ticks / hertz * 1e6 / max(report["succeeded"], 1)
print(f"{label:10} {workload:8} {report['throughput_ops_per_second']:8.0f}/s  p50 {latency['p50_us'] / 1000:.3f} ms"
      f"  p99 {latency['p99_us'] / 1000:.3f} ms  CPU {cpu:.0f} us/op  failed {report['failed']}")
PYTHON
done
echo "$label RSS (KiB): $(members_rss_kib)"
