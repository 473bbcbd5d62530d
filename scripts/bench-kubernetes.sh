#!/usr/bin/env bash
# Kubernetes' speed on revkv against etcd 3.6.16 and 3.7.3: the same kube-apiserver (1.37.2,
# scripts/cluster-kubernetes.sh) on a three-member cluster of each store in turn, driven by the
# same client-go program (cluster/go/kubernetes-bench). With 1, 16 and 64 clients it creates
# 10,000 ConfigMaps (256 bytes of data each), updates each once with the resourceVersion its create
# returned, lists them whole and a page of 500 at a time, and deletes them, while a watcher on
# their namespace times each create's and update's event from the writer's request. Every row
# reports throughput, p50 and p99, and the CPU the store's three members (and the apiserver) spent
# per request; the members' memory is read after each row.
#
#   scripts/bench-kubernetes.sh
#
# Only the apiserver runs (no controller manager, no scheduler: nothing they do touches
# ConfigMaps), with its defaults, as scripts/cluster.sh up --kubernetes starts it; the client
# speaks protobuf over one HTTP/2 connection without a client-side rate limit, as a controller
# with N workers does. Each store runs with its own defaults (revkv: scripts/cluster.sh; etcd:
# ../shared/anchors/etcd-cluster.sh, names, URLs and the log level only).
#
# Settings (environment):
#   REVKV_KUBE_BENCH_STORES   the stores, in order (default "revkv etcd-3.6 etcd-3.7 kine"; kine is
#                             v0.17.5 on SQLite, k3s's store, built with cgo as k3s ships it:
#                             one process, so no replication, which the summary says)
#   REVKV_KUBE_BENCH_ROUNDS   how many times to run every store (default: as many as stores); round
#                             K starts at the K-th store and wraps around, so that every store runs
#                             once in every position; the summary is the median of each round's
#                             ratio
#   REVKV_KUBE_BENCH_OBJECTS  ConfigMaps per client count (default 10000)
#   REVKV_KUBE_BENCH_CLIENTS  client counts (default "1,16,64")
#   REVKV_KUBE_BENCH_RESULTS_DIR  where each run's rows (JSON lines) and the summary go
#                             (default target/bench-kubernetes)
#
# Ports: revkv 7001-7003, 7101-7103, 7201-7203; etcd 12379-32380 (the anchor's); kine 2379; the
# apiserver 6443. They must be free.
set -euo pipefail
export LC_ALL=C
repo=$(cd "$(dirname "$0")/.." && pwd)
root=$repo
cd "$repo"

stores=${REVKV_KUBE_BENCH_STORES:-revkv etcd-3.6 etcd-3.7 kine}
read -r -a store_list <<<"$stores"
((${#store_list[@]} > 0)) || { echo "bench-kubernetes: REVKV_KUBE_BENCH_STORES names no store" >&2; exit 2; }
rounds=${REVKV_KUBE_BENCH_ROUNDS:-${#store_list[@]}}
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "bench-kubernetes: REVKV_KUBE_BENCH_ROUNDS must be 1 to 99" >&2; exit 2; }
objects=${REVKV_KUBE_BENCH_OBJECTS:-10000}
clients=${REVKV_KUBE_BENCH_CLIENTS:-1,16,64}
results_dir=${REVKV_KUBE_BENCH_RESULTS_DIR:-$repo/target/bench-kubernetes}

work_dir=$(mktemp -d "${TMPDIR:-/tmp}/revkv-bench-kubernetes.XXXXXX")
# shellcheck source=scripts/bench-lib.sh
source "$repo/scripts/bench-lib.sh"
# What scripts/cluster-kubernetes.sh takes from its includer: the control plane's certificates and
# logs live in the work directory, shared by every store's run.
cluster_dir="$work_dir/control-plane"
members=(1 2 3)
tls_dir="$cluster_dir/tls"
uses_tls() { false; }
scheme() { echo http; }
# shellcheck source=scripts/stop-process.sh
source "$repo/scripts/stop-process.sh"
# shellcheck source=scripts/cluster-kubernetes.sh
source "$repo/scripts/cluster-kubernetes.sh"

cleanup() {
  local status=$?
  trap - EXIT
  kubernetes_down >/dev/null 2>&1 || true
  stop_cluster >/dev/null 2>&1 || true
  if ((status == 0)); then rm -rf "$work_dir"; else echo "bench-kubernetes: logs kept in $work_dir" >&2; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

print_machine() {
  print_machine_head
  echo "kubernetes: $("$(kubernetes_tools)/kube-apiserver" --version)"
  local version
  for version in 3.6 3.7; do
    [[ " $stores " == *" etcd-$version "* ]] || continue
    echo "etcd $version:   $("$(etcd_bin_dir "$version")/etcd" --version | head -n 1)"
  done
  if [[ " $stores " == *" kine "* ]]; then echo "kine:       $("$revkv_tools_dir/go/kine/kine" --version 2>&1 | head -n 1)"; fi
  echo "workload:   $objects ConfigMaps per client count, clients $clients"
  echo "uptime:     $(uptime)"
}

# Runs the apiserver and the program on store $1; its rows go to $2.
run_store() {
  local store=$1 output=$2 servers started
  case "$store" in
    revkv) start_revkv >/dev/null; servers="http://127.0.0.1:7201,http://127.0.0.1:7202,http://127.0.0.1:7203" ;;
    etcd-3.6 | etcd-3.7)
      start_etcd "${store#etcd-}" >/dev/null
      servers="http://127.0.0.1:12379,http://127.0.0.1:22379,http://127.0.0.1:32379" ;;
    kine) start_kine >/dev/null; servers="http://127.0.0.1:2379" ;;
    *) echo "bench-kubernetes: unknown store $store (revkv, etcd-3.6, etcd-3.7, kine)" >&2; exit 2 ;;
  esac
  kubernetes_etcd_servers=$servers
  kubernetes_start kube-apiserver
  kubernetes_wait_for kube-apiserver "kube-apiserver ready" kubernetes_kubectl get --raw /readyz
  started=$SECONDS
  sync
  local store_pids
  store_pids=$(IFS=,; echo "${member_pids[*]}")
  if ! "$bench_binary" --kubeconfig "$kubernetes_dir/admin.kubeconfig" --store "$store" \
    --objects "$objects" --clients "$clients" --store-pids "$store_pids" \
    --apiserver-pid "$(cat "$(kubernetes_pid_file kube-apiserver)")" >"$output" 2>"$output.log"; then
    echo "bench-kubernetes: the run on $store failed:" >&2
    tail -n 20 "$output.log" >&2
    cp "$kubernetes_dir/kube-apiserver.log" "$output.apiserver.log" 2>/dev/null || true
    exit 1
  fi
  echo "   $store: $(wc -l <"$output") rows in $((SECONDS - started)) s"
  kubernetes_down >/dev/null
  stop_cluster
}

echo "== building Kubernetes 1.37.2, the etcds and kine and the benchmark program (once, privately, when missing)"
kubernetes_build
for store in "${store_list[@]}"; do
  case "$store" in etcd-3.6 | etcd-3.7 | kine) go_tools_build "$store" ;; esac
  # kine's readiness check uses etcd 3.6's etcdctl.
  if [[ "$store" == kine ]]; then go_tools_build etcd-3.6; fi
done
bench_binary="$go_tools_cache/kubernetes-bench/kubernetes-bench"
mkdir -p "$(dirname "$bench_binary")"
(cd cluster/go/kubernetes-bench && go_tools_go build -o "$bench_binary" .)
unset CARGO_TARGET_DIR
if [[ " $stores " == *" revkv "* ]]; then
  echo "== building the release binary"
  cargo build --release --quiet -p revkv --bin revkv
fi
kubernetes_set_up >/dev/null

mkdir -p "$results_dir"
rm -rf "$results_dir"/round-*
print_machine | tee "$results_dir/machine.txt"
round_dirs=()
for round in $(seq "$rounds"); do
  round_dir="$results_dir/round-$round"
  round_dirs+=("$round_dir")
  mkdir -p "$round_dir"
  order=$(rotated_order "$round" "${store_list[@]}")
  echo "== round $round of $rounds ($(date -u '+%H:%M:%S UTC')), order: $order"
  for store in $order; do run_store "$store" "$round_dir/$store.jsonl"; done
  python3 scripts/kubernetes_bench_summary.py "${store_list[@]}" -- "$round_dir" | tee "$round_dir/summary.md"
done
if ((rounds > 1)); then
  echo
  python3 scripts/kubernetes_bench_summary.py "${store_list[@]}" -- "${round_dirs[@]}" | tee "$results_dir/summary.md"
fi
