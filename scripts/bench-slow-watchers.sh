#!/usr/bin/env bash
# Writes beside many watchers of which some read slowly or not at all (issue 65, item 3): revkv's
# etcd gRPC port against etcd 3.6 and 3.7, a fresh three-member cluster of each, the order rotated
# by round.
#
#   scripts/bench-slow-watchers.sh
#
# In each round, for each system, on one fresh cluster, the same write load three times, measured
# by etcd's own `benchmark put` at the leader (the same client for every system): 8-byte
# sequential keys, 256-byte values, REVKV_SLOW_WATCHERS_RATE puts per second (default 300) for
# REVKV_SLOW_WATCHERS_SECONDS (60), 8 clients over 8 connections. The three phases:
#   none     no watchers;
#   reading  REVKV_SLOW_WATCHERS_WATCHES watches (default 10,000) held by `revkv bench
#            hold-watches` over the three members, 100 to a stream, every one read;
#   stalled  as many, of which REVKV_SLOW_WATCHERS_STALLED_PERCENT (default 10) ride streams that
#            are never read after their watches are created, each on a connection of its own.
# Each watch covers the keys of one of the 64 first bytes the benchmark's keys have, so a put
# reaches about one watch in 64 (156 of 10,000): every watch gets events all along, and a stream
# left unread fills. The write rate is fixed, below what every system sustains here, so that the
# phases compare latency at the same load.
#
# Per phase: put throughput, p50 and p99; the members' CPU per put and their RSS at the end of
# the phase, the watches still held; the holder's report (events read, and at the end what the
# member kept for the stalled streams and how their watches ended). The summary gives the median
# over rounds per system and phase, and the ratios the issue asks about: stalled / none and
# stalled / reading for p50 and p99, per system.
#
# Settings: REVKV_SLOW_WATCHERS_SYSTEMS (default "revkv-grpc etcd3.6 etcd3.7"),
# REVKV_SLOW_WATCHERS_ROUNDS (default: as many as systems), REVKV_SLOW_WATCHERS_RATE,
# REVKV_SLOW_WATCHERS_SECONDS, REVKV_SLOW_WATCHERS_WATCHES, REVKV_SLOW_WATCHERS_STALLED_PERCENT,
# REVKV_SLOW_WATCHERS_RESULTS_DIR (default target/bench-slow-watchers), REVKV_BINARY (the members'
# and the holder's binary instead of this checkout's release build).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
systems=${REVKV_SLOW_WATCHERS_SYSTEMS:-revkv-grpc etcd3.6 etcd3.7}
read -r -a system_list <<<"$systems"
rounds=${REVKV_SLOW_WATCHERS_ROUNDS:-${#system_list[@]}}
rate=${REVKV_SLOW_WATCHERS_RATE:-300}
seconds=${REVKV_SLOW_WATCHERS_SECONDS:-60}
watches=${REVKV_SLOW_WATCHERS_WATCHES:-10000}
stalled_percent=${REVKV_SLOW_WATCHERS_STALLED_PERCENT:-10}
for count in "$rounds" "$rate" "$seconds" "$watches"; do
  [[ "$count" =~ ^[1-9][0-9]*$ ]] ||
    { echo "bench-slow-watchers: the rounds, rate, seconds and watches must be counts" >&2; exit 2; }
done
[[ "$stalled_percent" =~ ^[0-9]+$ ]] && ((stalled_percent <= 100)) ||
  { echo "bench-slow-watchers: the stalled percentage must be 0 to 100" >&2; exit 2; }
total=$((rate * seconds))
results_dir=${REVKV_SLOW_WATCHERS_RESULTS_DIR:-$repo/target/bench-slow-watchers}
binary="${REVKV_BINARY:-$repo/target/release/revkv}"
work_dir=$(mktemp -d "${TMPDIR:-/tmp}/revkv-bench-slow-watchers.XXXXXX")
holder_pid=""
# shellcheck source=scripts/bench-lib.sh
source "$repo/scripts/bench-lib.sh"
cleanup() {
  local status=$?
  trap - EXIT
  if [[ -n "$holder_pid" ]]; then kill "$holder_pid" 2>/dev/null || true; fi
  stop_cluster >/dev/null 2>&1 || true
  rm -rf "$work_dir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts system $1's cluster; sets `grpc_endpoints` (every member's etcd gRPC URL) and points
# `leader_endpoint` at the leader's gRPC port.
start_system() {
  case "$1" in
    revkv-grpc)
      start_revkv
      leader_endpoint="http://127.0.0.1:720${leader_endpoint: -1}"
      grpc_endpoints=http://127.0.0.1:7201,http://127.0.0.1:7202,http://127.0.0.1:7203 ;;
    etcd3.6 | etcd3.7)
      start_etcd "${1#etcd}"
      grpc_endpoints=http://127.0.0.1:12379,http://127.0.0.1:22379,http://127.0.0.1:32379 ;;
    *) echo "bench-slow-watchers: unknown system $1" >&2; exit 2 ;;
  esac
}

# Starts the holder of $1 percent stalled watches, and waits until every watch is created.
start_holder() {
  local stem=$1 percent=$2
  # A script's background job starts with SIGINT ignored; the holder is stopped with SIGINT, so
  # it gets the default disposition back (then installs its own handler).
  env --default-signal=INT "$binary" bench hold-watches --target etcd-grpc --endpoints "$grpc_endpoints" \
    --watchers "$watches" --stalled-percent "$percent" --conns 3 --duration 30m \
    >"$stem.holder.json" 2>"$stem.holder.log" &
  holder_pid=$!
  for _ in $(seq 1200); do
    grep -q "watches open" "$stem.holder.log" && return 0
    kill -0 "$holder_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench-slow-watchers: the watches were not all created; see $stem.holder.log" >&2
  cat "$stem.holder.log" >&2
  return 1
}

# Ends the holder; it reads what the member kept for its stalled streams and reports.
stop_holder() {
  kill -INT "$holder_pid"
  wait "$holder_pid" || { echo "bench-slow-watchers: the holder failed; see its log" >&2; return 1; }
  holder_pid=""
}

# One phase ($2: none, reading or stalled) of system $1, writing $3/$1-$2.*.
run_phase() {
  local system=$1 phase=$2 round_dir=$3 stem before after
  stem="$round_dir/$system-$phase"
  case "$phase" in
    reading) start_holder "$stem" 0 ;;
    stalled) start_holder "$stem" "$stalled_percent" ;;
  esac
  before=$(members_cpu_ticks)
  "$(go_tools_dir etcd-benchmark)/benchmark" --endpoints "${leader_endpoint#http://}" \
    --conns 8 --clients 8 --precise put --key-size 8 --sequential-keys --val-size 256 \
    --key-space-size "$total" --total "$total" --rate "$rate" >"$stem.txt" 2>"$stem.log"
  after=$(members_cpu_ticks)
  printf '%s\n%s\n%s\n' "$((after - before))" "$(getconf CLK_TCK)" "$(members_rss_kib)" >"$stem.measures"
  if [[ "$phase" != none ]]; then stop_holder; fi
  python3 "$repo/scripts/etcd_benchmark_report.py" single <"$stem.txt" >"$stem.json"
  python3 "$repo/scripts/bench_slow_watchers_summary.py" one "$round_dir" "$system" "$phase"
}

# shellcheck source=scripts/go-tools.sh
source "$repo/scripts/go-tools.sh"
go_tools_build etcd-benchmark >/dev/null
for version in 3.6 3.7; do
  if [[ " $systems " == *" etcd$version "* ]]; then etcd_build_if_absent "$version"; fi
done
unset CARGO_TARGET_DIR
[[ -n "${REVKV_BINARY:-}" ]] || (cd "$repo" && cargo build --release --quiet -p revkv --bin revkv)
mkdir -p "$results_dir"
rm -rf "$results_dir"/round-*
{
  print_machine_head
  for version in 3.6 3.7; do
    [[ " $systems " == *" etcd$version "* ]] || continue
    echo "etcd $version:   $("$(etcd_bin_dir "$version")/etcd" --version | head -n 1)"
  done
  echo "load:       benchmark put (etcd v3.7.1's tool), $rate puts/s for $seconds s, 8 clients over 8 connections"
  echo "watches:    $watches (revkv bench hold-watches), $stalled_percent % on streams never read in phase stalled"
  echo "uptime:     $(uptime)"
} | tee "$results_dir/machine.txt"

note_if_rounds_unbalanced "$rounds" "${#system_list[@]}"
for round in $(seq "$rounds"); do
  round_dir="$results_dir/round-$round"
  mkdir -p "$round_dir"
  round_order=$(rotated_order "$round" "${system_list[@]}")
  echo "== round $round of $rounds ($(date -u '+%H:%M:%S UTC')), order: $round_order"
  for system in $round_order; do
    start_system "$system"
    for phase in none reading stalled; do run_phase "$system" "$phase" "$round_dir"; done
    stop_cluster
  done
done
echo
python3 "$repo/scripts/bench_slow_watchers_summary.py" all "$results_dir" "${system_list[@]}" |
  tee "$results_dir/summary.md"
