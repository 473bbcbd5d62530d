#!/usr/bin/env bash
# Sustained writes as the store grows: revkv against today's etcd (3.6 and 3.7), each at its
# leader and at its own best connection count, one system at a time, the order rotated by round.
#
#   scripts/bench-sustained.sh
#
# 1. Builds what it needs when missing: etcd 3.6 and 3.7 (privately, scripts/go-tools.sh) and the
#    release `revkv` binary (its `bench` subcommand is the client of every system).
# 2. Finds each system's best connection count: on a fresh cluster of that system, a probe of
#    REVKV_SUSTAINED_PROBE_TOTAL writes (64 clients, distinct keys) at every count of
#    REVKV_SUSTAINED_CONNS; the count with the most writes per second is the one its rounds use.
#    etcd's own performance notes, and docs/BENCHMARKS.md, find etcd writing best over one
#    connection and revkv over several, so a single count for all would favour one of them.
# 3. Runs REVKV_SUSTAINED_ROUNDS rounds (default: as many as systems). Round K starts with the
#    K-th system, so that every system runs first once (what the previous run left behind, the
#    host's hour, cost each position something). In each: for each system, a fresh three-member
#    cluster, REVKV_SUSTAINED_TOTAL distinct keys (default 1,000,000) written with `revkv bench put
#    --clients 64 --value-size 256` at its leader, printing the throughput of every 10-second
#    window (does the cost per write grow with the store?), then the members' RSS, the size of
#    their data directories and their CPU time, per key written.
# 4. Prints every round and, per system, the median over the rounds; the ratio revkv / better
#    etcd for writes per second, CPU, memory and disk, per round and as the median of rounds.
#
# revkv (`revkv-grpc`) and etcd are driven alike, through etcd's gRPC API by the same client (the
# etcd-client crate) over shared connections, as scripts/bench-vs-etcd.sh's second view; the
# system `revkv` drives revkv's HTTP API instead (one keep-alive connection per client; no probe).
# etcd's own `benchmark` tool, the client of scripts/bench-vs-etcd.sh, cannot print a throughput
# per window, which is what this benchmark is for; its million distinct keys would be
# `benchmark put --sequential-keys --key-space-size 1000000`.
#
# Settings: REVKV_SUSTAINED_TOTAL (default 1000000), REVKV_SUSTAINED_CLIENTS (64),
# REVKV_SUSTAINED_CONNS (the gRPC connection counts the probe tries, default "1 8 64", as
# scripts/bench-vs-etcd.sh sweeps),
# REVKV_SUSTAINED_PROBE_TOTAL (writes of each probe, default 50000), REVKV_SUSTAINED_ROUNDS
# (default: the number of systems), REVKV_SUSTAINED_SYSTEMS (default "revkv-grpc etcd3.6
# etcd3.7"; also revkv, etcd3.4, etcd3.5), REVKV_SUSTAINED_RESULTS_DIR (default
# target/bench-sustained), REVKV_BINARY (run revkv from another binary, e.g. an older build for an
# A/B, instead of building this checkout). A run stops after 30 minutes whatever it has written.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
total=${REVKV_SUSTAINED_TOTAL:-1000000}
clients=${REVKV_SUSTAINED_CLIENTS:-64}
conns_list=${REVKV_SUSTAINED_CONNS:-1 8 64}
probe_total=${REVKV_SUSTAINED_PROBE_TOTAL:-50000}
systems=${REVKV_SUSTAINED_SYSTEMS:-revkv-grpc etcd3.6 etcd3.7}
read -r -a system_list <<<"$systems"
rounds=${REVKV_SUSTAINED_ROUNDS:-${#system_list[@]}}
for count in "$total" "$clients" "$probe_total" "$rounds" $conns_list; do
  [[ "$count" =~ ^[1-9][0-9]*$ ]] ||
    { echo "bench-sustained: the total, clients, conns, probe total and rounds must be counts" >&2; exit 2; }
done
ceiling=30m
results_dir=${REVKV_SUSTAINED_RESULTS_DIR:-$repo/target/bench-sustained}
binary="${REVKV_BINARY:-$repo/target/release/revkv}"
work_dir=$(mktemp -d "${TMPDIR:-/tmp}/revkv-bench-sustained.XXXXXX")
# shellcheck source=scripts/bench-lib.sh
source "$repo/scripts/bench-lib.sh"
cleanup() { local status=$?; trap - EXIT; stop_cluster >/dev/null 2>&1 || true; rm -rf "$work_dir"; exit "$status"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts system $1's cluster and sets `target` (revkv bench's --target) and `grpc` (yes when the
# system is driven over shared gRPC connections).
start_system() {
  case "$1" in
    revkv) start_revkv; target=revkv; grpc=no ;;
    # The same members through their etcd gRPC port (scripts/cluster.sh: 7201-7203).
    revkv-grpc)
      start_revkv
      leader_endpoint="http://127.0.0.1:720${leader_endpoint: -1}"
      target=etcd-grpc; grpc=yes ;;
    etcd3.4 | etcd3.5 | etcd3.6 | etcd3.7) start_etcd "${1#etcd}"; target=etcd-grpc; grpc=yes ;;
    *) echo "bench-sustained: unknown system $1" >&2; exit 2 ;;
  esac
}

# The connection arguments of system $1 at count $2 (none for revkv's HTTP API).
connection_arguments() {
  if [[ "$1" == revkv ]]; then return; fi
  printf '%s\n' --conns "$2"
}

# Sets probed_conns to the connection count system $1 writes fastest at, from a probe on a fresh
# cluster at each count. (Not a command substitution: the cluster it starts must be the one the
# EXIT trap stops if a probe fails.)
probe_best_conns() {
  local system=$1 conns best_rate=0 rate
  probed_conns=0
  if [[ "$system" == revkv ]]; then return; fi
  for conns in $conns_list; do
    start_system "$system"
    "$binary" bench put --clients "$clients" --conns "$conns" --value-size 256 \
      --total "$probe_total" --duration "$ceiling" \
      --target "$target" --endpoints "$leader_endpoint" -o json \
      >"$results_dir/probe-$system-$conns.json" 2>/dev/null
    stop_cluster
    rate=$(python3 -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["throughput_ops_per_second"]))' \
      "$results_dir/probe-$system-$conns.json")
    echo "   probe $system --conns $conns: $rate writes/s"
    if (( rate > best_rate )); then best_rate=$rate; probed_conns=$conns; fi
  done
}

# Runs system $1 once at connection count $2, writing $3/$1.{json,progress,measures}.
run_system() {
  local system=$1 conns=$2 round_dir=$3 cpu_before cpu_ticks rss disk
  start_system "$system"
  local arguments=()
  mapfile -t arguments < <(connection_arguments "$system" "$conns")
  echo "== $system: revkv bench put --clients $clients ${arguments[*]} --total $total --target $target --endpoints $leader_endpoint"
  # The progress line (stderr) gives each second's throughput; keep it to show the trend.
  cpu_before=$(members_cpu_ticks)
  "$binary" bench put --clients "$clients" "${arguments[@]}" --value-size 256 \
    --total "$total" --duration "$ceiling" \
    --target "$target" --endpoints "$leader_endpoint" -o json \
    >"$round_dir/$system.json" 2>"$round_dir/$system.progress"
  cpu_ticks=$(($(members_cpu_ticks) - cpu_before))
  # Let each member finish applying and give freed memory back (jemalloc: about a second) before
  # reading what it holds.
  sleep 5
  rss=$(members_rss_kib)
  disk=$(members_disk_kib | awk '{for (i = 1; i <= NF; i++) sum += $i} END {print sum}')
  printf '%s\n%s\n%s\n%s\n%s\n' "$rss" "$disk" "$cpu_ticks" "$(getconf CLK_TCK)" "$conns" \
    >"$round_dir/$system.measures"
  python3 "$repo/scripts/bench_sustained_summary.py" one "$round_dir" "$system"
  stop_cluster
}

if [[ " $systems " == *" etcd3.4 "* || " $systems " == *" etcd3.5 "* ]]; then install_etcd_if_absent; fi
for version in 3.6 3.7; do
  if [[ " $systems " == *" etcd$version "* ]]; then etcd_build_if_absent "$version"; fi
done
unset CARGO_TARGET_DIR
[[ -n "${REVKV_BINARY:-}" ]] || (cd "$repo" && cargo build --release --quiet -p revkv --bin revkv)
mkdir -p "$results_dir"
rm -rf "$results_dir"/probe-*.json "$results_dir"/round-*
{
  print_machine_head
  for version in 3.4 3.5 3.6 3.7; do
    [[ " $systems " == *" etcd$version "* ]] || continue
    echo "etcd $version:   $("$(etcd_bin_dir "$version")/etcd" --version | head -n 1)"
  done
  echo "client:     revkv bench put (the etcd-client crate over gRPC), $clients clients, 256-byte values"
  echo "uptime:     $(uptime)"
} | tee "$results_dir/machine.txt"

echo "== probes: $probe_total writes at each of --conns $conns_list, a fresh cluster each"
declare -A chosen_conns
for system in "${system_list[@]}"; do
  probe_best_conns "$system"
  chosen_conns[$system]=$probed_conns
  [[ "$system" == revkv ]] || echo "   $system runs at --conns ${chosen_conns[$system]}"
done

note_if_rounds_unbalanced "$rounds" "${#system_list[@]}"
round_dirs=()
for round in $(seq "$rounds"); do
  round_dir="$results_dir/round-$round"
  round_dirs+=("$round_dir")
  mkdir -p "$round_dir"
  round_order=$(rotated_order "$round" "${system_list[@]}")
  echo "== round $round of $rounds ($(date -u '+%H:%M:%S UTC')), order: $round_order"
  for system in $round_order; do
    run_system "$system" "${chosen_conns[$system]}" "$round_dir"
  done
done
echo
python3 "$repo/scripts/bench_sustained_summary.py" all "$results_dir" "${system_list[@]}" |
  tee "$results_dir/summary.md"
