#!/usr/bin/env bash
# The controller runtime's measurement (issue 64): the same replica-set controller written twice,
# with revkv's Rust runtime (cluster/client/examples/replica_controller.rs, over revkv's HTTP API)
# and with client-go's work queue and indexer (cluster/go/controller-bench, over revkv's etcd gRPC
# port), each keeping the same sets on the same three-member revkv cluster while the same driver
# (cluster/client/examples/controller_bench.rs) changes specs at a steady rate and times each
# change from its write to the status that observes it.
#
#   scripts/bench-controller.sh
#
# Settings (environment):
#   REVKV_CONTROLLER_BENCH_OBJECTS   replica sets (default 10000; each has 2 replicas at first)
#   REVKV_CONTROLLER_BENCH_RATE      spec changes per second (default 100)
#   REVKV_CONTROLLER_BENCH_SECONDS   how long the steady load runs (default 60)
#   REVKV_CONTROLLER_BENCH_WORKERS   each controller's workers (default 4)
#   REVKV_CONTROLLER_BENCH_ROUNDS    rounds; round K starts with the K-th controller (default 2)
#   REVKV_CONTROLLER_BENCH_RESULTS   where the JSON lines go (default target/bench-controller)
#   REVKV_CONTROLLER_BENCH_CONTROLLERS  which controllers run (default "rust client-go")
#   REVKV_CONTROLLER_BENCH_GRPC_ENDPOINTS  the client-go controller's endpoints (default the three
#                                    members' gRPC ports; the Rust one uses REVKV_ENDPOINTS' order)
#
# Uses scripts/cluster.sh's ports (7001-7003, 7101-7103, 7201-7203) and directory (a private one
# under the results directory); they must be free.
set -euo pipefail
export LC_ALL=C
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

objects=${REVKV_CONTROLLER_BENCH_OBJECTS:-10000}
rate=${REVKV_CONTROLLER_BENCH_RATE:-100}
seconds=${REVKV_CONTROLLER_BENCH_SECONDS:-60}
workers=${REVKV_CONTROLLER_BENCH_WORKERS:-4}
rounds=${REVKV_CONTROLLER_BENCH_ROUNDS:-2}
results=${REVKV_CONTROLLER_BENCH_RESULTS:-$repo/target/bench-controller}
controllers=${REVKV_CONTROLLER_BENCH_CONTROLLERS:-rust client-go}
grpc_endpoints=${REVKV_CONTROLLER_BENCH_GRPC_ENDPOINTS:-127.0.0.1:7201,127.0.0.1:7202,127.0.0.1:7203}
for setting in "$objects" "$rate" "$seconds" "$workers" "$rounds"; do
  [[ "$setting" =~ ^[1-9][0-9]*$ ]] || { echo "bench-controller: settings are positive integers" >&2; exit 2; }
done

# shellcheck source=scripts/go-tools.sh
source "$repo/scripts/go-tools.sh"
echo "== building the release binaries and the client-go controller (once, privately)"
cargo build --release --quiet -p revkv --bin revkv
cargo build --release --quiet -p revkv-client --example replica_controller --example controller_bench
target_dir=${CARGO_TARGET_DIR:-$repo/target}
go_controller="$go_tools_cache/controller-bench/controller-bench-go"
mkdir -p "$(dirname "$go_controller")"
(cd cluster/go/controller-bench && go_tools_go build -o "$go_controller" .)

mkdir -p "$results"
export REVKV_CLUSTER_DIR="$results/cluster"
export REVKV_PROFILE=release
export REVKV_ENDPOINTS=http://127.0.0.1:7001,http://127.0.0.1:7002,http://127.0.0.1:7003
trap 'scripts/cluster.sh down >/dev/null 2>&1 || true' EXIT

rust_command=("$target_dir/release/examples/replica_controller" serve --workers "$workers")
go_command=("$go_controller" --endpoints "$grpc_endpoints" --prefix examples/controller/
  --workers "$workers")

run_one() {
  local label=$1; shift
  rm -rf "$REVKV_CLUSTER_DIR"
  scripts/cluster.sh up >/dev/null
  echo "== $label: $objects sets, $rate changes/s for $seconds s, $workers workers"
  "$target_dir/release/examples/controller_bench" --objects "$objects" --rate "$rate" \
    --duration "$seconds" --label "$label" -- "$@" | tee -a "$results/runs.jsonl"
  scripts/cluster.sh down >/dev/null
}

: >"$results/runs.jsonl"
read -r -a controller_list <<<"$controllers"
run_controller() {
  case "$1" in
    rust) run_one rust "${rust_command[@]}" ;;
    client-go) run_one client-go "${go_command[@]}" ;;
    *) echo "bench-controller: no controller '$1' (rust, client-go)" >&2; exit 2 ;;
  esac
}
# Round K starts with the K-th controller and wraps around, so each runs first in some round.
for ((round = 1; round <= rounds; round++)); do
  count=${#controller_list[@]}
  for ((position = 0; position < count; position++)); do
    run_controller "${controller_list[(round - 1 + position) % count]}"
  done
done
echo "== results: $results/runs.jsonl"
