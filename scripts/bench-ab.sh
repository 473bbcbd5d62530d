#!/usr/bin/env bash
# A/B of two revkv binaries on this machine: starts three members from one binary (client ports
# 7001-7003, peer ports 7101-7103, data in a temporary directory), runs workloads at the leader,
# prints throughput, latency and the members' CPU per operation (user + system from /proc), their
# RSS, and stops them. Run it for each binary in turn, alternating, to compare two builds in the
# same minutes (docs/BENCHMARKS.md, "What each step did").
#
#   scripts/bench-ab.sh BINARY LABEL [WORKLOAD...]     workloads: put-1 put-64 put-256 lin-64 ser-64
#
# Settings: AB_DURATION (default 8s), AB_FLAGS (extra `revkv serve` flags), AB_LEADER (move
# leadership to this member id before the workloads), AB_TMPFS_MEMBERS (ids whose data directory
# goes in /dev/shm: a diagnostic that takes those members' fsyncs off the disk and so breaks
# durability; docs/BENCHMARKS.md, "What a single client's write costs on this disk").
set -uo pipefail
binary=${1:?binary}; label=${2:?label}; shift 2
workloads=("${@:-put-1 put-64}")
repo=$(cd "$(dirname "$0")/.." && pwd)
work_dir=$(mktemp -d "${TMPDIR:-/tmp}/revkv-ab.XXXXXX")
dir=$work_dir
# shellcheck source=scripts/bench-lib.sh
source "$repo/scripts/bench-lib.sh"
initial_cluster="1=http://127.0.0.1:7101,2=http://127.0.0.1:7102,3=http://127.0.0.1:7103"
memory_dir=""
if [[ -n "${AB_TMPFS_MEMBERS:-}" ]]; then
  memory_dir=$(mktemp -d /dev/shm/revkv-ab.XXXXXX)
fi
cleanup() {
  for pid in "${member_pids[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$dir" ${memory_dir:+"$memory_dir"}
}
trap cleanup EXIT
for id in 1 2 3; do
  data_dir="$dir/m$id"
  [[ " ${AB_TMPFS_MEMBERS:-} " == *" $id "* ]] && data_dir="$memory_dir/m$id"
  # shellcheck disable=SC2086 # AB_FLAGS is a list of flags on purpose
  "$binary" serve --id "$id" --data-dir "$data_dir" --listen-client "127.0.0.1:700$id" \
    --listen-peer "127.0.0.1:710$id" --initial-cluster "$initial_cluster" ${AB_FLAGS:-} \
    >"$dir/m$id.log" 2>&1 &
  member_pids+=($!)
done
current_leader() {
  curl -sf http://127.0.0.1:7001/v1/status 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin).get("leader_id") or "")' 2>/dev/null
}
leader=""
for _ in $(seq 200); do
  leader=$(current_leader)
  [[ -n "$leader" ]] && break
  sleep 0.1
done
[[ -n "$leader" ]] || { echo "bench-ab: no leader; see $dir" >&2; exit 1; }
if [[ -n "${AB_LEADER:-}" && "$leader" != "$AB_LEADER" ]]; then
  "$binary" ctl leader transfer "$AB_LEADER" \
    --endpoints http://127.0.0.1:7001,http://127.0.0.1:7002,http://127.0.0.1:7003 >/dev/null
  for _ in $(seq 100); do
    leader=$(current_leader)
    [[ "$leader" == "$AB_LEADER" ]] && break
    sleep 0.1
  done
  [[ "$leader" == "$AB_LEADER" ]] || { echo "bench-ab: leadership stayed at $leader" >&2; exit 1; }
fi
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
