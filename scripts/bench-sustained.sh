#!/usr/bin/env bash
# Sustained writes as the store grows: revkv against etcd, each at its leader, one after the other.
#
#   scripts/bench-sustained.sh
#
# For each system: starts its three-member cluster, writes REVKV_SUSTAINED_TOTAL distinct keys
# (default 1,000,000) with `revkv bench put --clients 64` against the leader, printing the
# throughput of every 10-second window (does the cost per write grow with the store?), then reports
# the members' RSS and the size of their data directories, per key written. Every system writes the
# same keys, so memory and disk compare like with like. revkv (`revkv-grpc`) and etcd are driven
# alike, through etcd's gRPC API by the same client over REVKV_SUSTAINED_CONNS shared connections
# (as scripts/bench-vs-etcd.sh); `revkv` drives revkv's HTTP API instead. Needs what
# scripts/bench-vs-etcd.sh needs (it installs etcd 3.4 and 3.5 when absent).
#
# Settings: REVKV_SUSTAINED_TOTAL (default 1000000), REVKV_SUSTAINED_CLIENTS (64),
# REVKV_SUSTAINED_CONNS (gRPC connections, default 8), REVKV_SUSTAINED_SYSTEMS (default
# "revkv-grpc etcd3.4 etcd3.5"; also revkv), REVKV_SUSTAINED_RESULTS_DIR (default
# target/bench-sustained), REVKV_BINARY (run revkv from another binary, e.g. an older build for an
# A/B, instead of building this checkout). A run stops after 30 minutes whatever it has written.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
total=${REVKV_SUSTAINED_TOTAL:-1000000}
clients=${REVKV_SUSTAINED_CLIENTS:-64}
conns=${REVKV_SUSTAINED_CONNS:-8}
systems=${REVKV_SUSTAINED_SYSTEMS:-revkv-grpc etcd3.4 etcd3.5}
[[ "$total" =~ ^[1-9][0-9]*$ && "$clients" =~ ^[1-9][0-9]*$ && "$conns" =~ ^[1-9][0-9]*$ ]] ||
  { echo "bench-sustained: the total, clients and conns must be counts" >&2; exit 2; }
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

start_system() {
  case "$1" in
    revkv) start_revkv; target=revkv; connection_arguments=() ;;
    # The same members through their etcd gRPC port (scripts/cluster.sh: 7201-7203).
    revkv-grpc)
      start_revkv
      leader_endpoint="http://127.0.0.1:720${leader_endpoint: -1}"
      target=etcd-grpc; connection_arguments=(--conns "$conns") ;;
    etcd3.4) start_etcd 3.4; target=etcd-grpc; connection_arguments=(--conns "$conns") ;;
    etcd3.5) start_etcd 3.5; target=etcd-grpc; connection_arguments=(--conns "$conns") ;;
    *) echo "bench-sustained: unknown system $1" >&2; exit 2 ;;
  esac
}

install_etcd_if_absent
unset CARGO_TARGET_DIR
[[ -n "${REVKV_BINARY:-}" ]] || (cd "$repo" && cargo build --release --quiet -p revkv --bin revkv)
mkdir -p "$results_dir"
echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, revkv $(git -C "$repo" rev-parse --short HEAD)"
for system in $systems; do
  start_system "$system"
  echo "== $system: revkv bench put --clients $clients ${connection_arguments[*]} --total $total --target $target --endpoints $leader_endpoint"
  # The progress line (stderr) gives each second's throughput; keep it to show the trend.
  cpu_before=$(members_cpu_ticks)
  "$binary" bench put --clients "$clients" "${connection_arguments[@]}" --value-size 256 \
    --total "$total" --duration "$ceiling" \
    --target "$target" --endpoints "$leader_endpoint" -o json \
    >"$results_dir/$system.json" 2>"$results_dir/$system.progress"
  cpu_ticks=$(($(members_cpu_ticks) - cpu_before))
  # Let each member finish applying and give freed memory back (jemalloc: about a second) before
  # reading what it holds.
  sleep 5
  rss=$(members_rss_kib)
  disk=$(members_disk_kib | awk '{for (i = 1; i <= NF; i++) sum += $i} END {print sum}')
  python3 - "$results_dir/$system.json" "$results_dir/$system.progress" "$rss" "$disk" "$system" \
    "$cpu_ticks" "$(getconf CLK_TCK)" <<'PYTHON'
import json, re, sys
report = json.load(open(sys.argv[1]))
keys = report["succeeded"]
rates = [int(m.group(1).replace(",", "")) for m in
         re.finditer(r"([\d,]+) ops/s in the last interval", open(sys.argv[2]).read())]
windows = [sum(rates[i:i + 10]) / len(rates[i:i + 10]) for i in range(0, len(rates), 10)]
rss = [int(v) for v in sys.argv[3].split()]
disk_kib = int(sys.argv[4])
cpu_us_per_write = int(sys.argv[6]) / int(sys.argv[7]) * 1e6 / max(keys, 1)
print(f"   {sys.argv[5]}: {keys:,} keys, {report['throughput_ops_per_second']:,.0f} writes/s overall, "
      f"p99 {report['latency']['p99_us'] / 1000:.1f} ms, {report['failed']} failed, "
      f"CPU {cpu_us_per_write:.0f} us per write (three members)")
print("   writes/s per 10 s window: " + ", ".join(f"{w:,.0f}" for w in windows))
print(f"   RSS per member: {', '.join(f'{v // 1024} MB' for v in rss)}; "
      f"{max(rss) * 1024 / max(keys, 1):.0f} bytes per key written (largest member)")
print(f"   data on disk, three members: {disk_kib // 1024} MB; "
      f"{disk_kib * 1024 / 3 / max(keys, 1):.0f} bytes per key per member")
PYTHON
  stop_cluster
done
