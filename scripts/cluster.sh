#!/usr/bin/env bash
# A three-member revkv cluster on this machine, for trying revkv out and for benchmarks.
#
#   scripts/cluster.sh up       build the binary if needed, start members 1-3, wait until
#                               a leader is elected, every member is ready and every member lists
#                               every member's client and gRPC URLs, print the endpoints and the
#                               web console's URL
#   scripts/cluster.sh up --prometheus
#                               the same, then also start Debian's `prometheus` on 127.0.0.1:9090
#                               (REVKV_PROMETHEUS_PORT) scraping the members (scripts/prometheus.yml),
#                               its data under the cluster directory
#   scripts/cluster.sh up --tls the same with TLS on the client and peer listeners (mutual TLS between
#                               members): makes a throw-away CA and member certificates with openssl
#                               under the cluster directory's tls/ (the CA is tls/ca.pem), once, and
#                               serves https://127.0.0.1:7001-7003
#   scripts/cluster.sh up --kubernetes
#                               the same, then also Kubernetes 1.37.2's control plane on loopback
#                               storing its objects in the three members (kube-apiserver on
#                               https://127.0.0.1:6443, kube-controller-manager, kube-scheduler),
#                               built once from the Go module proxy into the private tools
#                               directory with kubectl (scripts/cluster-kubernetes.sh)
#   scripts/cluster.sh down     stop exactly the processes `up` started (by pid file), Prometheus
#                               and Kubernetes too
#   scripts/cluster.sh status   each member's role, term, leader and revision
#   scripts/cluster.sh logs     the last lines of each member's log (logs -f follows them)
#   scripts/cluster.sh env      shell commands that put this cluster's `revkv` on PATH and point
#                               `revkv ctl` at its members: eval "$(scripts/cluster.sh env)"; once
#                               --kubernetes ran, also KUBECONFIG and the private kubectl
#
# Client ports 7001-7003, peer ports 7101-7103, etcd gRPC ports 7201-7203, everything under ${REVKV_CLUSTER_DIR:-./.cluster}.
# Extra flags for every member can be passed in REVKV_CLUSTER_FLAGS. The binary is built with
# Cargo's `quick` profile (Cargo.toml: release optimisation without link-time optimisation, so a
# fresh clone's first build takes minutes, not ten); REVKV_PROFILE=release builds and runs the
# benchmarks' fully optimised binary instead, and REVKV_BINARY runs another revkv binary (A/B
# benchmarks) without building.
set -euo pipefail

# Resolved through symbolic links, so the script works from a directory that links to scripts/.
root=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
cluster_dir=${REVKV_CLUSTER_DIR:-./.cluster}
profile=${REVKV_PROFILE:-quick}
binary="${REVKV_BINARY:-${CARGO_TARGET_DIR:-$root/target}/$profile/revkv}"
members=(1 2 3)
initial_cluster="1=http://127.0.0.1:7101,2=http://127.0.0.1:7102,3=http://127.0.0.1:7103"
ready_timeout_seconds=${REVKV_CLUSTER_READY_TIMEOUT:-60}

prometheus_port=${REVKV_PROMETHEUS_PORT:-9090}
prometheus_pid_file="$cluster_dir/prometheus.pid"

# shellcheck source=scripts/stop-process.sh
source "$root/scripts/stop-process.sh"
# shellcheck source=scripts/cluster-kubernetes.sh
source "$root/scripts/cluster-kubernetes.sh"

tls_dir="$cluster_dir/tls"
# A cluster directory that has a CA was started with --tls: its members speak https.
uses_tls() { [[ -f "$tls_dir/ca.pem" ]]; }
scheme() { if uses_tls; then echo https; else echo http; fi; }
client_url() { echo "$(scheme)://127.0.0.1:700$1"; }
# curl that trusts the cluster's CA when it has one.
member_curl() {
  if uses_tls; then curl --cacert "$tls_dir/ca.pem" "$@"; else curl "$@"; fi
}
pid_file() { echo "$cluster_dir/member-$1.pid"; }

is_running() {
  local pid_path
  pid_path=$(pid_file "$1")
  [[ -f "$pid_path" ]] && kill -0 "$(cat "$pid_path")" 2>/dev/null
}

build() {
  [[ -n "${REVKV_BINARY:-}" ]] && return 0
  (cd "$root" && cargo build --profile "$profile" --quiet -p revkv --bin revkv)
}

# A throw-away CA and one certificate per member (127.0.0.1 and localhost, for both server and
# client authentication, as peers use them both ways), made once per cluster directory.
make_certificates() {
  if uses_tls; then return; fi
  if ! command -v openssl >/dev/null 2>&1; then
    echo "openssl is needed for --tls (Debian: apt-get install openssl)" >&2
    exit 1
  fi
  mkdir -p "$tls_dir"
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -days 30 -subj "/CN=revkv throw-away CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$tls_dir/ca-key.pem" -out "$tls_dir/ca.pem.new" 2>/dev/null
  for id in "${members[@]}"; do
    openssl req "${ec[@]}" -subj "/CN=revkv member $id" \
      -keyout "$tls_dir/member-$id-key.pem" -out "$tls_dir/member-$id.csr" 2>/dev/null
    openssl x509 -req -days 30 -in "$tls_dir/member-$id.csr" -CA "$tls_dir/ca.pem.new" \
      -CAkey "$tls_dir/ca-key.pem" -CAcreateserial -out "$tls_dir/member-$id.pem" \
      -extfile <(printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" \
        "extendedKeyUsage=serverAuth,clientAuth" "keyUsage=critical,digitalSignature" \
        "basicConstraints=CA:FALSE") 2>/dev/null
    rm -f "$tls_dir/member-$id.csr"
  done
  # The CA goes in place last: its presence is what marks the directory as a TLS cluster.
  mv "$tls_dir/ca.pem.new" "$tls_dir/ca.pem"
  echo "made a throw-away CA and member certificates in $tls_dir"
}

# The serve flags of member $1's TLS, when the cluster uses it.
tls_flags() {
  uses_tls || return 0
  local id=$1
  echo --cert-file "$tls_dir/member-$id.pem" --key-file "$tls_dir/member-$id-key.pem" \
    --peer-cert-file "$tls_dir/member-$id.pem" --peer-key-file "$tls_dir/member-$id-key.pem" \
    --peer-trusted-ca-file "$tls_dir/ca.pem" --peer-client-cert-auth
}

start_member() {
  local id=$1
  mkdir -p "$cluster_dir"
  if is_running "$id"; then
    echo "member $id already running (pid $(cat "$(pid_file "$id")"))"
    return
  fi
  local peers=${initial_cluster//http:/$(scheme):}
  # shellcheck disable=SC2086,SC2046 # REVKV_CLUSTER_FLAGS and the TLS flags are lists on purpose.
  nohup "$binary" serve --id "$id" --data-dir "$cluster_dir/member-$id" \
    --listen-client "127.0.0.1:700$id" --listen-peer "127.0.0.1:710$id" \
    --listen-grpc "127.0.0.1:720$id" \
    --initial-cluster "$peers" $(tls_flags "$id") ${REVKV_CLUSTER_FLAGS:-} \
    >"$cluster_dir/member-$id.log" 2>&1 &
  echo $! >"$(pid_file "$id")"
}

wait_until_ready() {
  local deadline=$((SECONDS + ready_timeout_seconds))
  for id in "${members[@]}"; do
    # Checked before every probe, so another cluster answering on the same port (this member
    # could not bind it and exited) is never taken for this one.
    until is_running "$id" && member_curl -sf "$(client_url "$id")/readyz" >/dev/null 2>&1; do
      if ! is_running "$id"; then
        echo "member $id exited; see $cluster_dir/member-$id.log" >&2
        exit 1
      fi
      if ((SECONDS >= deadline)); then
        echo "member $id did not become ready in ${ready_timeout_seconds}s; see $cluster_dir/member-$id.log" >&2
        exit 1
      fi
      sleep 0.1
    done
  done
  # A member that lost a port race exits just after binding fails; one more look at each.
  for id in "${members[@]}"; do
    if ! is_running "$id"; then
      echo "member $id exited; see $cluster_dir/member-$id.log" >&2
      exit 1
    fi
  done
}

# Waits until every member lists every member's client and gRPC URL: founding members publish
# them through raft once a leader is known, a moment after they are ready, and etcdctl's
# `--cluster` commands dial exactly those URLs.
wait_until_published() {
  local deadline=$((SECONDS + ready_timeout_seconds)) id listed
  for id in "${members[@]}"; do
    until listed=$(member_curl -sf "$(client_url "$id")/v1/members" 2>/dev/null) &&
      python3 -c '
import json, sys
members = json.loads(sys.argv[1])["members"]
wanted = int(sys.argv[2])
sys.exit(not (len(members) >= wanted and all(m.get("client_url") and m.get("grpc_url") for m in members)))
' "$listed" "${#members[@]}"; do
      if ((SECONDS >= deadline)); then
        echo "member $id did not list every member's client URLs in ${ready_timeout_seconds}s; see $cluster_dir/member-$id.log" >&2
        exit 1
      fi
      sleep 0.1
    done
  done
}

up() {
  local with_prometheus=false with_tls=false with_kubernetes=false
  for option in "$@"; do
    case "$option" in
      --prometheus) with_prometheus=true ;;
      --tls) with_tls=true ;;
      --kubernetes) with_kubernetes=true ;;
      *) echo "usage: $0 up [--prometheus] [--tls] [--kubernetes]" >&2; exit 2 ;;
    esac
  done
  # A cluster's members keep their peer URLs in their data, so the scheme cannot change later.
  if [[ "$with_tls" == false ]] && uses_tls; then
    echo "$cluster_dir was started with --tls: run up --tls, or down and remove $cluster_dir" >&2
    exit 2
  fi
  if [[ "$with_tls" == true ]] && ls -d "$cluster_dir"/member-*/ >/dev/null 2>&1 && ! uses_tls; then
    echo "$cluster_dir holds a plain-HTTP cluster: down and remove $cluster_dir first" >&2
    exit 2
  fi
  if [[ "$with_tls" == true && "$with_prometheus" == true ]]; then
    echo "--prometheus scrapes plain HTTP only; it does not go with --tls" >&2
    exit 2
  fi
  build
  # Built before any member starts, so a long first build never runs beside a cluster.
  if [[ "$with_kubernetes" == true ]]; then kubernetes_build; fi
  if [[ "$with_tls" == true ]]; then make_certificates; fi
  for id in "${members[@]}"; do start_member "$id"; done
  wait_until_ready
  wait_until_published
  echo "revkv cluster ready; client endpoints:"
  for id in "${members[@]}"; do echo "  member $id: $(client_url "$id")"; done
  echo "etcd gRPC endpoints (etcdctl --endpoints): 127.0.0.1:7201,127.0.0.1:7202,127.0.0.1:7203"
  if uses_tls; then echo "  CA: $tls_dir/ca.pem (curl --cacert, revkv ctl --cacert)"; fi
  echo "web console (every member serves it): $(client_url 1)/ui/"
  if [[ "$with_prometheus" == true ]]; then start_prometheus; fi
  if [[ "$with_kubernetes" == true ]]; then kubernetes_up; fi
}

prometheus_is_running() {
  [[ -f "$prometheus_pid_file" ]] && kill -0 "$(cat "$prometheus_pid_file")" 2>/dev/null
}

# Debian's prometheus, scraping the three members, with its data under the cluster directory.
start_prometheus() {
  if ! command -v prometheus >/dev/null 2>&1; then
    echo "prometheus is not installed (Debian: apt-get install prometheus); the cluster runs without it" >&2
    exit 1
  fi
  if prometheus_is_running; then
    echo "prometheus already running (pid $(cat "$prometheus_pid_file"))"
    return
  fi
  if curl -s --max-time 1 "http://127.0.0.1:$prometheus_port/" >/dev/null 2>&1; then
    echo "127.0.0.1:$prometheus_port is taken (a system prometheus service?); stop it or set REVKV_PROMETHEUS_PORT" >&2
    exit 1
  fi
  mkdir -p "$cluster_dir/prometheus"
  nohup prometheus --config.file="$root/scripts/prometheus.yml" \
    --storage.tsdb.path="$cluster_dir/prometheus" \
    --web.listen-address="127.0.0.1:$prometheus_port" \
    >"$cluster_dir/prometheus.log" 2>&1 &
  echo $! >"$prometheus_pid_file"
  local deadline=$((SECONDS + ready_timeout_seconds))
  until curl -sf "http://127.0.0.1:$prometheus_port/-/ready" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)) || ! prometheus_is_running; then
      echo "prometheus did not become ready; see $cluster_dir/prometheus.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "prometheus ready: http://127.0.0.1:$prometheus_port (scraping members 1-3 every 5s)"
}

stop_prometheus() {
  [[ -f "$prometheus_pid_file" ]] || return 0
  local pid
  pid=$(cat "$prometheus_pid_file")
  stop_process "$pid" && echo "prometheus stopped"
  rm -f "$prometheus_pid_file"
}


down() {
  kubernetes_down
  for id in "${members[@]}"; do
    local pid_path
    pid_path=$(pid_file "$id")
    [[ -f "$pid_path" ]] || continue
    stop_process "$(cat "$pid_path")" && echo "member $id stopped"
    rm -f "$pid_path"
  done
  stop_prometheus
}

status() {
  printf '%-7s %-8s %-10s %-5s %-7s %-9s\n' MEMBER PID ROLE TERM LEADER REVISION
  for id in "${members[@]}"; do
    local pid="-"
    is_running "$id" && pid=$(cat "$(pid_file "$id")")
    local answer
    if answer=$(member_curl -sf --max-time 2 "$(client_url "$id")/v1/status" 2>/dev/null); then
      python3 -c 'import json,sys; s=json.loads(sys.argv[2]); print("%-7s %-8s %-10s %-5s %-7s %-9s" % (sys.argv[1], sys.argv[3], s["role"], s["raft_term"], s["leader_id"], s["revision"]))' "$id" "$answer" "$pid"
    else
      printf '%-7s %-8s %-10s\n' "$id" "$pid" unreachable
    fi
  done
}

logs() {
  if [[ "${1:-}" == "-f" ]]; then
    tail -f "$cluster_dir"/member-*.log
  else
    tail -n 40 "$cluster_dir"/member-*.log
  fi
}

# What a shell needs to use this cluster: the binary's directory first on PATH (so `revkv ctl`
# works as README writes it), the members for `revkv ctl` and the client examples, and, with TLS,
# the CA. Printed as commands for `eval`, so it changes nothing unless the user asks.
environment() {
  local directory endpoints=""
  directory=$(cd "$(dirname "$binary")" && pwd)
  for id in "${members[@]}"; do endpoints+="${endpoints:+,}$(client_url "$id")"; done
  printf 'export PATH=%q:"$PATH"\n' "$directory"
  printf 'export REVKV_ENDPOINTS=%q\n' "$endpoints"
  if uses_tls; then printf 'export REVKV_CACERT=%q\n' "$(cd "$tls_dir" && pwd)/ca.pem"; fi
  kubernetes_environment
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  status) status ;;
  logs) shift; logs "$@" ;;
  env) environment ;;
  *) echo "usage: $0 up [--prometheus] [--tls] [--kubernetes]|down|status|logs [-f]|env" >&2; exit 2 ;;
esac
