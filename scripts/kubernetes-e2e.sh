#!/usr/bin/env bash
# Kubernetes' control plane end to end, on revkv and on etcd 3.6: the same kube-apiserver,
# kube-controller-manager and kube-scheduler (1.37.2, scripts/cluster-kubernetes.sh) on each store
# in turn, driven by the same client-go program (cluster/go/kubernetes-e2e: Nodes made by hand and
# the kubelet's part played, a Deployment created, scaled, rolled out and deleted, a custom
# resource, 16 writers racing with RetryOnConflict, watch-lists, resumed and compacted watches, the
# apiserver's consistent reads from its cache and its cache consistency checker, and last the
# store's leader killed with SIGKILL under writers and informers). Each run prints its report; the
# script fails when a run fails or when the two reports differ in any line.
#
# usage: scripts/kubernetes-e2e.sh            revkv (three members) and etcd 3.6.16 (three members)
#        REVKV_E2E_STORES="revkv" scripts/kubernetes-e2e.sh
#
# The revkv members come from scripts/cluster.sh (REVKV_BINARY or its build), with prefix labels
# two segments deep so that conflicts show per Kubernetes resource (/registry/configmaps). Both
# runs use ports 7001-7003, 7101-7103 and 7201-7203 (revkv), 7301-7303 and 7311-7313 (etcd), 6443,
# 10257 and 10259, which must be free. Logs stay in the scratch directory when a run fails.
set -euo pipefail
export LC_ALL=C
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# `kill-leader STORE DIRECTORY`: what the program runs (--kill-leader) to kill -9 the leader of
# the store whose files are under DIRECTORY, found by asking the members which one leads.
if [[ "${1:-}" == kill-leader ]]; then
  store=$2 directory=$3
  case "$store" in
    revkv)
      leader=$(curl -sf http://127.0.0.1:7001/v1/status || curl -sf http://127.0.0.1:7002/v1/status)
      leader=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["leader_id"])' "$leader")
      pid_file="$directory/member-$leader.pid"
      ;;
    etcd-3.6)
      source scripts/go-tools.sh
      status=$("$(go_tools_dir etcd-3.6)/etcdctl" -w json endpoint status \
        --endpoints=http://127.0.0.1:7301,http://127.0.0.1:7302,http://127.0.0.1:7303)
      leader=$(python3 -c '
import json, sys
for endpoint in json.loads(sys.argv[1]):
    if endpoint["Status"]["header"]["member_id"] == endpoint["Status"]["leader"]:
        print(endpoint["Endpoint"][-1])
' "$status")
      pid_file="$directory/etcd-$leader.pid"
      ;;
  esac
  kill -KILL "$(cat "$pid_file")"
  echo "killed the leader of $store (${pid_file##*/})"
  exit 0
fi
stores=${REVKV_E2E_STORES:-revkv etcd-3.6}

scratch=$(mktemp -d)
succeeded=false
cleanup() {
  kubernetes_down >/dev/null 2>&1 || true
  REVKV_CLUSTER_DIR="$scratch/revkv" scripts/cluster.sh down >/dev/null 2>&1 || true
  stop_etcd
  if [[ "$succeeded" == true ]]; then rm -rf "$scratch"; else echo "kubernetes-e2e: logs kept in $scratch" >&2; fi
}
trap cleanup EXIT

# What scripts/cluster-kubernetes.sh takes from its includer (scripts/cluster.sh defines the same).
cluster_dir="$scratch/revkv"
members=(1 2 3)
tls_dir="$cluster_dir/tls"
uses_tls() { false; }
scheme() { echo http; }
# shellcheck source=scripts/stop-process.sh
source "$root/scripts/stop-process.sh"
# shellcheck source=scripts/cluster-kubernetes.sh
source "$root/scripts/cluster-kubernetes.sh"

# The compactor runs every 10 s (default 5 min), so a watch from a compacted resourceVersion can be
# tried; PodTemplates have no watch cache, so that watch reaches the store.
export REVKV_KUBERNETES_APISERVER_FLAGS="--etcd-compaction-interval=10s --watch-cache-sizes=podtemplates#0"
# A watch cache that differs from the store makes the apiserver panic (the checker of
# k8s.io/apiserver pkg/storage/cacher/consistency; DetectCacheInconsistency is on by default).
export KUBE_WATCHCACHE_CONSISTENCY_CHECKER=true

# Reports $1 and $2 agree when they differ only in remarks: lines starting with #, which count what
# differs by design (conflicts, checks).
compare_reports() {
  diff <(grep -v '^#' "$1") <(grep -v '^#' "$2")
}

# Shows compare_reports catching a planted difference and passing one in remarks alone.
self_test() {
  printf '%s\n' "update race: count 800" "# revkv counted 12 conflicts" >"$scratch/a"
  printf '%s\n' "update race: count 800" "# revkv counted 30 conflicts" >"$scratch/b"
  printf '%s\n' "update race: count 799" "# revkv counted 12 conflicts" >"$scratch/c"
  if ! compare_reports "$scratch/a" "$scratch/b" >/dev/null; then
    echo "kubernetes-e2e: self-test: reports that differ only in remarks were refused" >&2
    exit 1
  fi
  if compare_reports "$scratch/a" "$scratch/c" >/dev/null; then
    echo "kubernetes-e2e: self-test: a planted difference was not caught" >&2
    exit 1
  fi
  rm -f "$scratch/a" "$scratch/b" "$scratch/c"
  echo "kubernetes-e2e: self-test: a planted difference is caught"
}
self_test

go_tools_build kubernetes-1.37
go_tools_build etcd-3.6
e2e_binary="$go_tools_cache/kubernetes-e2e/kubernetes-e2e"
mkdir -p "$(dirname "$e2e_binary")"
(cd cluster/go/kubernetes-e2e && go_tools_go build -o "$e2e_binary" .)

etcd_pids=()
start_etcd() {
  local etcd data initial="" id
  etcd="$(go_tools_dir etcd-3.6)/etcd"
  for id in 1 2 3; do initial+="${initial:+,}etcd-$id=http://127.0.0.1:731$id"; done
  for id in 1 2 3; do
    data="$scratch/etcd-3.6/etcd-$id"
    mkdir -p "$data"
    # etcd 3.6's defaults otherwise, as an operator would run it.
    "$etcd" --name "etcd-$id" --data-dir "$data" \
      --listen-client-urls "http://127.0.0.1:730$id" --advertise-client-urls "http://127.0.0.1:730$id" \
      --listen-peer-urls "http://127.0.0.1:731$id" --initial-advertise-peer-urls "http://127.0.0.1:731$id" \
      --initial-cluster "$initial" --initial-cluster-state new \
      >"$scratch/etcd-3.6/etcd-$id.log" 2>&1 &
    etcd_pids+=($!)
    echo $! >"$scratch/etcd-3.6/etcd-$id.pid"
  done
  local deadline=$((SECONDS + 120))
  until "$(go_tools_dir etcd-3.6)/etcdctl" --endpoints "$kubernetes_etcd_servers" endpoint health >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "kubernetes-e2e: etcd 3.6 not healthy within 120 s; see $scratch/etcd-3.6" >&2
      exit 1
    fi
    sleep 0.2
  done
}
stop_etcd() {
  local pid
  for pid in "${etcd_pids[@]}"; do stop_process "$pid" || true; done
  etcd_pids=()
}

# Runs the control plane and the program on store $1; the report goes to $scratch/$1.report.
run_on() {
  local store=$1 metrics=""
  cluster_dir="$scratch/$store"
  kubernetes_dir="$cluster_dir/kubernetes"
  mkdir -p "$cluster_dir"
  case "$store" in
    revkv)
      kubernetes_etcd_servers=""
      REVKV_CLUSTER_DIR="$cluster_dir" REVKV_CLUSTER_FLAGS="--metrics-prefix-depth 2" \
        scripts/cluster.sh up >"$cluster_dir/up.log"
      metrics="http://127.0.0.1:7001/metrics,http://127.0.0.1:7002/metrics,http://127.0.0.1:7003/metrics"
      ;;
    etcd-3.6)
      kubernetes_etcd_servers="http://127.0.0.1:7301,http://127.0.0.1:7302,http://127.0.0.1:7303"
      start_etcd
      ;;
    *) echo "kubernetes-e2e: unknown store $store (revkv, etcd-3.6)" >&2; exit 2 ;;
  esac
  kubernetes_up >>"$cluster_dir/up.log"
  local started=$SECONDS
  local store_files="$cluster_dir"
  [[ "$store" == etcd-3.6 ]] && store_files="$scratch/etcd-3.6"
  if ! "$e2e_binary" --kubeconfig "$kubernetes_dir/admin.kubeconfig" --revkv-metrics "$metrics" \
    --kill-leader "$root/scripts/kubernetes-e2e.sh kill-leader $store $store_files" \
    >"$scratch/$store.report" 2>"$scratch/$store.stderr"; then
    echo "kubernetes-e2e: the run on $store failed:" >&2
    tail -n 20 "$scratch/$store.stderr" >&2
    exit 1
  fi
  echo "kubernetes-e2e: $store passed in $((SECONDS - started)) s"
  sed 's/^/  /' "$scratch/$store.report"
  kubernetes_down >/dev/null
  case "$store" in
    revkv) REVKV_CLUSTER_DIR="$cluster_dir" scripts/cluster.sh down >/dev/null ;;
    etcd-3.6) stop_etcd ;;
  esac
}

read -r -a store_list <<<"$stores"
for store in "${store_list[@]}"; do run_on "$store"; done

if ((${#store_list[@]} > 1)); then
  first=${store_list[0]}
  for store in "${store_list[@]:1}"; do
    if ! compare_reports "$scratch/$first.report" "$scratch/$store.report" >"$scratch/diff"; then
      echo "kubernetes-e2e: Kubernetes reported differently on $first and on $store:" >&2
      cat "$scratch/diff" >&2
      exit 1
    fi
  done
  echo "kubernetes-e2e: Kubernetes reported the same on ${store_list[*]}"
fi
succeeded=true
