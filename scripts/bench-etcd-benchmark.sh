# Sourced by scripts/bench-vs-etcd.sh: the workloads as etcd's own `benchmark` tool runs them
# (go.etcd.io/etcd/v3/tools/benchmark of etcd v3.7.1, built by `scripts/go-tools.sh
# etcd-benchmark` into the private tools directory), and one run of one of them against a
# cluster's leader, reported as `revkv bench -o json` reports (scripts/etcd_benchmark_report.py).
#
# The shapes are etcd's performance guide's (etcd.io, "Performance" in the operations guide):
# one client on one connection, and many clients over few connections (there 1,000 clients over
# 100 connections, here 64 and 256 clients, tried over 1, 8 and 64 connections, for a 2-core
# machine), put with 8-byte sequential keys and 256-byte values, range of one key linearizable
# and serializable. Two changes from the guide, the same for every system: each put run writes
# distinct keys (`--key-space-size` = its total; the guide's default of 1 overwrites one key), so
# that the members' memory after the run can be compared per key; and the leader's endpoint is
# given alone, which is what the guide's `--target-leader` did (the v3.7 tool has no such flag).
# txn-mixed, watch-latency and lease-keepalive run at the tool's own defaults but for the client
# counts.
#
# The caller (scripts/bench-vs-etcd.sh) sets put_total, put1_total, range_total, txn_total,
# lease_total, selected_workloads, conns_sweep, leader_endpoint, leader_pid, profile_workload,
# round_dir, counted_run_ceiling and pause_seconds, and provides members_cpu_ticks (scripts/bench-lib.sh) and keep_best_conns.

benchmark_tools_dir=""
# The key the range workloads read, written with a 256-byte value before them.
benchmark_range_key=bench-range-key

# name|clients|report section (etcd_benchmark_report.py)|arguments after the global flags
benchmark_workload_table() {
  local put_keys="--key-size 8 --sequential-keys --val-size 256"
  printf '%s\n' \
    "put-1|1|single|put $put_keys --key-space-size $put1_total --total $put1_total" \
    "put-64|64|single|put $put_keys --key-space-size $put_total --total $put_total" \
    "put-256|256|single|put $put_keys --key-space-size $put_total --total $put_total" \
    "range-lin-64|64|single|range $benchmark_range_key --consistency l --total $range_total" \
    "range-ser-64|64|single|range $benchmark_range_key --consistency s --total $range_total" \
    "txn-put-64|64|single|txn-put --key-size 8 --val-size 256 --key-space-size $put_total --total $txn_total" \
    "txn-mixed-64|64|txn-mixed|txn-mixed --key-size 8 --val-size 256 --key-space-size $put_total --total 10000" \
    "watch-latency-100|1|watch|watch-latency --streams 10 --watchers-per-stream 10 --put-total 1000 --put-rate 100" \
    "lease-keepalive-64|64|single|lease-keepalive --total $lease_total"
}

# Builds etcd's benchmark tool and etcd 3.7's etcdctl (which writes the range key and counts the
# keys) when missing: scripts/go-tools.sh, once, into the private tools directory.
benchmark_prepare() {
  # shellcheck source=scripts/go-tools.sh
  source "$repo/scripts/go-tools.sh"
  go_tools_build etcd-benchmark >/dev/null
  go_tools_build etcd-3.7 >/dev/null
  benchmark_tools_dir=$(go_tools_dir etcd-benchmark)
  benchmark_etcdctl="$(go_tools_dir etcd-3.7)/etcdctl"
}

# host:port of the leader, as the tool and etcdctl take it.
benchmark_leader_address() {
  echo "${leader_endpoint#http://}"
}

# Writes the key the range workloads read (every system gets the same 256-byte value).
benchmark_write_range_key() {
  "$benchmark_etcdctl" --endpoints "$(benchmark_leader_address)" put "$benchmark_range_key" \
    "$(printf 'v%.0s' $(seq 256))" >/dev/null
}

# The keys the system holds now, counted by its leader.
benchmark_count_keys() {
  # etcdctl 3.7 prints a count-only answer in its "fields" form alone: a line `"Count" : N`.
  "$benchmark_etcdctl" --endpoints "$(benchmark_leader_address)" get "" --prefix --count-only \
    -w fields | awk -F' : ' '$1 == "\"Count\"" {print $2}'
}

# Runs table entry $2 once with $3 connections against system $1's leader: writes
# $round_dir/$1-<name>-c$3.json (and the tool's own text beside it as .txt) and .cpu_ticks,
# and prints one line.
benchmark_run_one() {
  local system=$1 entry=$2 conns=$3 name clients section arguments stem before after
  IFS='|' read -r name clients section arguments <<<"$entry"
  stem="$round_dir/$system-$name-c$conns"
  sync
  sleep "$pause_seconds"
  echo "== $system $name: benchmark --endpoints $(benchmark_leader_address) --conns $conns --clients $clients --precise $arguments"
  local perf_pid=""
  if [[ "$system" == revkv* && ("$name" == "$profile_workload" || "$name-c$conns" == "$profile_workload") ]]; then
    perf record -g -o "$round_dir/perf-$system-$name-c$conns.data" -p "$leader_pid" \
      >"$round_dir/perf-$system-$name-c$conns.log" 2>&1 &
    perf_pid=$!
  fi
  before=$(members_cpu_ticks)
  # The tool's own CPU time (user and system seconds, /usr/bin/time) goes to $stem.client_cpu:
  # on two shared cores the load generator's CPU per operation bounds every system's throughput.
  # shellcheck disable=SC2086 # the arguments are a list of words on purpose
  timeout "$counted_run_ceiling" /usr/bin/time -f '%U %S' -o "$stem.client_cpu" \
    "$benchmark_tools_dir/benchmark" \
    --endpoints "$(benchmark_leader_address)" --conns "$conns" --clients "$clients" --precise \
    $arguments >"$stem.txt" 2>"$stem.log" || echo "   the benchmark tool exited with status $? (see $stem.log)"
  after=$(members_cpu_ticks)
  if [[ -n "$perf_pid" ]]; then kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" || true; fi
  python3 "$repo/scripts/etcd_benchmark_report.py" "$section" <"$stem.txt" >"$stem.json"
  echo "$((after - before))" >"$stem.cpu_ticks"
  python3 - "$stem.json" "$((after - before))" "$(getconf CLK_TCK)" "$stem.client_cpu" <<'PYTHON'
import json, sys
report, ticks, hertz = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
latency = report["latency"]
operations = max(report["succeeded"], 1)
cpu = ticks / hertz * 1e6 / operations
try:
    user, system = open(sys.argv[4]).read().split()[-2:]
    client = "%.0f us/op" % ((float(user) + float(system)) * 1e6 / operations)
except (OSError, ValueError):
    client = "unknown"
print("   %.0f ops/s, p50 %.3f ms, p99 %.3f ms, members' CPU %.0f us/op, the tool's CPU %s, %d failed %s" % (
    report["throughput_ops_per_second"], latency["p50_us"] / 1000, latency["p99_us"] / 1000,
    cpu, client, report["failed"], report["failures"] or ""))
PYTHON
}

# Every selected workload against system $1, each over every connection count of the sweep that
# does not exceed its clients; then the best count is kept (keep_best_conns, the caller's).
benchmark_run_workloads() {
  local system=$1 entry name clients conns
  if [[ " $selected_workloads " == *" range-"* ]]; then benchmark_write_range_key; fi
  while IFS= read -r entry; do
    IFS='|' read -r name clients _ <<<"$entry"
    [[ " $selected_workloads " == *" $name "* ]] || continue
    local tried=0
    for conns in $conns_sweep; do
      (( conns <= clients )) || continue
      benchmark_run_one "$system" "$entry" "$conns"
      tried=$((tried + 1))
    done
    # A sweep of counts all above this workload's clients: one connection per client.
    if (( tried == 0 )); then benchmark_run_one "$system" "$entry" "$clients"; fi
    keep_best_conns "$system" "$name"
  done < <(benchmark_workload_table)
}
