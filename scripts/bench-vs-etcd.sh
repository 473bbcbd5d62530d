#!/usr/bin/env bash
# revkv against etcd 3.4 on this machine, with the same load from the same tool (`revkv bench`).
#
#   scripts/bench-vs-etcd.sh
#
# 1. Installs etcd (Debian's etcd-server and etcd-client, with apt-get; needs root) if it is absent.
# 2. Builds the release `revkv` binary (into the repository's target/, where scripts/cluster.sh
#    looks for it; CARGO_TARGET_DIR is ignored for that reason).
# 3. Starts the three-member revkv cluster (scripts/cluster.sh, data in a temporary directory), runs
#    every workload below, stops it.
# 4. Starts the three-member etcd cluster (../shared/anchors/etcd-cluster.sh), runs the same
#    workloads with --target etcd, stops it. The two clusters never run at the same time.
# 5. Prints both systems side by side with the ratios revkv / etcd, and whether revkv meets the
#    targets of issue 3 (64-client writes >= 2x etcd's throughput, 1-client write p50 <= etcd's).
#
# Workloads: writes of distinct keys with 256-byte values with 1, 16 and 64 clients; linearizable
# and serializable reads of random pre-written keys with 16 clients. Clients are spread round-robin
# over the three members of each cluster.
#
# Settings (environment):
#   REVKV_BENCH_DURATION     length of each workload (default 10s)
#   REVKV_BENCH_READ_KEYS    keys the read workloads choose from (default 1000)
#   REVKV_BENCH_PAUSE        seconds of rest before each workload (default 2)
#   REVKV_BENCH_SYSTEMS      which systems to run, in order (default "revkv etcd")
#   REVKV_BENCH_RESULTS_DIR  where each run's JSON report and the summary go
#                            (default target/bench-vs-etcd)
#   REVKV_BENCH_PROFILE      a workload name (e.g. put-64): record `perf record -g` of the revkv
#                            leader during it, into the results directory (needs perf)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
etcd_anchor="$(dirname "$0")/../../shared/anchors/etcd-cluster.sh"
duration=${REVKV_BENCH_DURATION:-10s}
read_keys=${REVKV_BENCH_READ_KEYS:-1000}
pause_seconds=${REVKV_BENCH_PAUSE:-2}
systems=${REVKV_BENCH_SYSTEMS:-revkv etcd}
results_dir=${REVKV_BENCH_RESULTS_DIR:-$repo/target/bench-vs-etcd}
profile_workload=${REVKV_BENCH_PROFILE:-}
binary="$repo/target/release/revkv"

# name|arguments of `revkv bench` (the same for both systems; --target is added per system)
workloads=(
  "put-1|put --clients 1 --value-size 256"
  "put-16|put --clients 16 --value-size 256"
  "put-64|put --clients 64 --value-size 256"
  "get-linearizable-16|get --consistency linearizable --keys $read_keys --clients 16"
  "get-serializable-16|get --consistency serializable --keys $read_keys --clients 16"
  "cas-16-2|cas --clients 16 --keys 2"
)

if [[ ! -f "$etcd_anchor" ]]; then
  echo "bench-vs-etcd: $etcd_anchor not found." >&2
  echo "  The etcd side is started by shared/anchors/etcd-cluster.sh, which must sit in a shared/" >&2
  echo "  directory next to this repository (../shared from the repository root)." >&2
  exit 1
fi
etcd_anchor=$(cd "$(dirname "$etcd_anchor")" && pwd)/$(basename "$etcd_anchor")

work_dir=$(mktemp -d "${TMPDIR:-/tmp}/revkv-bench-vs-etcd.XXXXXX")
revkv_cluster_dir="$work_dir/revkv"
etcd_data_dir="$work_dir/etcd"
revkv_running=0
etcd_running=0
etcd_pids=()

stop_revkv() {
  REVKV_CLUSTER_DIR="$revkv_cluster_dir" "$repo/scripts/cluster.sh" down
  revkv_running=0
}

# The anchor script sends SIGTERM and removes the data directory after a second; an etcd member may
# take longer to exit (a leader hands over leadership first), so wait for each process it started.
stop_etcd() {
  bash "$etcd_anchor" stop "$etcd_data_dir"
  local pid
  for pid in "${etcd_pids[@]}"; do
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  etcd_pids=()
  etcd_running=0
}

cleanup() {
  local status=$?
  trap - EXIT
  if ((revkv_running)); then stop_revkv >/dev/null 2>&1 || true; fi
  if ((etcd_running)); then stop_etcd >/dev/null 2>&1 || true; fi
  rm -rf "$work_dir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

install_etcd_if_absent() {
  if command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1; then
    return
  fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "bench-vs-etcd: etcd is not installed; as root: apt-get install etcd-server etcd-client" >&2
    exit 1
  fi
  echo "== installing etcd-server and etcd-client (apt-get)"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server etcd-client
}

print_machine() {
  echo "== machine"
  echo "date:       $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "nproc:      $(nproc)"
  echo "cpu:        $(lscpu | sed -n 's/^Model name:[[:space:]]*//p')"
  echo "memory:     $(free -h | awk '/^Mem:/ {print $2}') total"
  echo "filesystem: $(df -hT "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $1, $2, $3}') (${TMPDIR:-/tmp})"
  echo "kernel:     $(uname -r)"
  echo "etcd:       $(etcd --version | head -n 1)"
  echo "uptime:     $(uptime)"
}

# The pid of the revkv leader, from member 1's view and the pid files of scripts/cluster.sh.
revkv_leader_pid() {
  local leader_id
  leader_id=$(curl -sf http://127.0.0.1:7001/v1/status | python3 -c 'import json, sys; print(json.load(sys.stdin)["leader_id"])')
  cat "$revkv_cluster_dir/member-$leader_id.pid"
}

run_workloads() {
  local system=$1 entry name arguments perf_pid
  for entry in "${workloads[@]}"; do
    name=${entry%%|*}
    arguments=${entry#*|}
    sync
    sleep "$pause_seconds"
    echo "== $system $name: revkv bench $arguments --target $system --duration $duration"
    perf_pid=""
    if [[ "$system" == revkv && "$name" == "$profile_workload" ]]; then
      local leader_pid
      leader_pid=$(revkv_leader_pid)
      echo "   recording perf of the leader (pid $leader_pid) into $results_dir/perf-$name.data"
      perf record -g -o "$results_dir/perf-$name.data" -p "$leader_pid" \
        >"$results_dir/perf-$name.log" 2>&1 &
      perf_pid=$!
    fi
    # shellcheck disable=SC2086 # the arguments are a list of words on purpose
    "$binary" bench $arguments --target "$system" --duration "$duration" -o json \
      >"$results_dir/$system-$name.json"
    if [[ -n "$perf_pid" ]]; then
      kill -INT "$perf_pid" 2>/dev/null || true
      wait "$perf_pid" || true
    fi
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
l = r["latency"]
print("   %.0f ops/s, p50 %.3f ms, p99 %.3f ms, %d failed %s" % (
    r["throughput_ops_per_second"], l["p50_us"] / 1000, l["p99_us"] / 1000, r["failed"],
    r["failures"] or ""))' "$results_dir/$system-$name.json"
  done
}

run_revkv() {
  echo "== starting the revkv cluster"
  revkv_running=1
  REVKV_CLUSTER_DIR="$revkv_cluster_dir" "$repo/scripts/cluster.sh" up
  # The term before and after the workloads tells whether an election happened during them.
  REVKV_CLUSTER_DIR="$revkv_cluster_dir" "$repo/scripts/cluster.sh" status
  echo "uptime: $(uptime)"
  run_workloads revkv
  echo "uptime: $(uptime)"
  REVKV_CLUSTER_DIR="$revkv_cluster_dir" "$repo/scripts/cluster.sh" status
  stop_revkv
}

# Each member's raft term, leader and revision (the term tells whether an election happened).
print_etcd_status() {
  ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379 \
    endpoint status -w table || true
}

run_etcd() {
  echo "== starting the etcd cluster"
  etcd_running=1
  bash "$etcd_anchor" start "$etcd_data_dir"
  local member
  for member in 1 2 3; do etcd_pids+=("$(cat "$etcd_data_dir/e$member.pid")"); done
  # The anchor waits for one healthy member; wait until all three are, and a leader is known.
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379 \
      endpoint health >/dev/null 2>&1 && break
    sleep 0.2
  done
  print_etcd_status
  echo "uptime: $(uptime)"
  run_workloads etcd
  echo "uptime: $(uptime)"
  print_etcd_status
  stop_etcd
}

summarise() {
  python3 - "$results_dir" "${workloads[@]}" <<'PYTHON'
import json, os, sys

results_dir, entries = sys.argv[1], sys.argv[2:]
names = [entry.split("|", 1)[0] for entry in entries]

def load(system, name):
    path = os.path.join(results_dir, f"{system}-{name}.json")
    return json.load(open(path)) if os.path.exists(path) else None

def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"

def fmt_ops(report):
    return f"{report['throughput_ops_per_second']:,.0f}" if report else "-"

def fmt_ms(report, field):
    return f"{report['latency'][field] / 1000:.3f}" if report else "-"

header = ["workload", "revkv ops/s", "etcd ops/s", "ratio",
          "revkv p50 ms", "etcd p50 ms", "ratio", "revkv p99 ms", "etcd p99 ms", "ratio",
          "failed (revkv/etcd)"]
rows = []
for name in names:
    r, e = load("revkv", name), load("etcd", name)
    value = lambda report, f: f(report) if report else None
    rows.append([
        name, fmt_ops(r), fmt_ops(e),
        ratio(value(r, lambda x: x["throughput_ops_per_second"]),
              value(e, lambda x: x["throughput_ops_per_second"])),
        fmt_ms(r, "p50_us"), fmt_ms(e, "p50_us"),
        ratio(value(r, lambda x: x["latency"]["p50_us"]), value(e, lambda x: x["latency"]["p50_us"])),
        fmt_ms(r, "p99_us"), fmt_ms(e, "p99_us"),
        ratio(value(r, lambda x: x["latency"]["p99_us"]), value(e, lambda x: x["latency"]["p99_us"])),
        f"{r['failed'] if r else '-'}/{e['failed'] if e else '-'}",
    ])

widths = [max(len(str(row[i])) for row in [header] + rows) for i in range(len(header))]
lines = ["  ".join(str(cell).rjust(widths[i]) if i else str(cell).ljust(widths[i])
                   for i, cell in enumerate(row)) for row in [header] + rows]
markdown = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
markdown += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]

verdicts = []
put64 = (load("revkv", "put-64"), load("etcd", "put-64"))
put1 = (load("revkv", "put-1"), load("etcd", "put-1"))
if all(put64):
    got = put64[0]["throughput_ops_per_second"] / put64[1]["throughput_ops_per_second"]
    verdicts.append(f"64-client writes: revkv/etcd throughput {got:.2f} (target >= 2.00): "
                    + ("met" if got >= 2 else "NOT met"))
if all(put1):
    got = put1[0]["latency"]["p50_us"] / put1[1]["latency"]["p50_us"]
    verdicts.append(f"1-client write p50: revkv/etcd {got:.2f} (target <= 1.00): "
                    + ("met" if got <= 1 else "NOT met"))

text = "\n".join(lines + [""] + verdicts)
print(text)
with open(os.path.join(results_dir, "summary.md"), "w") as out:
    out.write("\n".join(markdown + [""] + ["- " + v for v in verdicts]) + "\n")
PYTHON
}

install_etcd_if_absent
unset CARGO_TARGET_DIR
echo "== building the release binary"
(cd "$repo" && cargo build --release --quiet --bin revkv)
mkdir -p "$results_dir"
rm -f "$results_dir"/*.json
print_machine

for system in $systems; do
  case "$system" in
    revkv) run_revkv ;;
    etcd) run_etcd ;;
    *) echo "bench-vs-etcd: unknown system $system in REVKV_BENCH_SYSTEMS" >&2; exit 2 ;;
  esac
done

echo
echo "== revkv vs etcd (ratio = revkv / etcd: above 1 is better for ops/s, below 1 for latency)"
summarise
echo
echo "JSON reports and summary.md: $results_dir"
