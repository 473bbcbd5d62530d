# Kubernetes 1.37.2's control plane on the three members of scripts/cluster.sh, which sources this
# file for `up --kubernetes`, `down` and `env` (and scripts/kubernetes-e2e.sh, below); it is not
# run on its own.
#
# kube-apiserver, kube-controller-manager and kube-scheduler run on loopback, built once from the
# Go module proxy into the private tools directory (scripts/go-tools.sh, tool set kubernetes-1.37)
# with kubectl beside them. kube-apiserver stores every object in revkv: --etcd-servers names the
# gRPC ports of all three members. Everything else lives under the cluster directory's kubernetes/:
# a throw-away CA, the API server's serving certificate, a client certificate per component and
# for the administrator (group system:masters), the service-account key pair, one kubeconfig per
# client, and the three logs and pid files.
#
# What differs from a production control plane, and why:
#   --endpoint-reconciler-type=none  The API server publishes its own address in the `kubernetes`
#                                    Service's endpoints, and Kubernetes refuses loopback
#                                    addresses there ("may not be in the loopback range"); its own
#                                    test server (cmd/kube-apiserver/app/testing) turns the
#                                    reconciler off for a loopback address, and so does this.
#   no node-lifecycle-controller     There are no kubelets. Nodes are made by hand (docs/guide/
#                                    kubernetes.md) and nothing renews their status, so the
#                                    controller would mark them unreachable after 40 s and evict
#                                    their pods; REVKV_KUBERNETES_CONTROLLERS sets the list.
#   no TaintNodesByCondition         That admission plugin taints every new Node not-ready until
#                                    the node-lifecycle controller sees it Ready and lifts the
#                                    taint; with that controller off, nothing would.
#
# Ports: the API server on 127.0.0.1:6443 (REVKV_KUBERNETES_PORT), the controller manager's and the
# scheduler's health on 10257 and 10259 (their defaults).
#
# What it takes from the script that sources it: root, cluster_dir, members, scheme, uses_tls,
# tls_dir and stop_process (scripts/cluster.sh). scripts/kubernetes-e2e.sh sources it too, with
# kubernetes_etcd_servers set to point the same control plane at etcd, and extra API server flags
# in REVKV_KUBERNETES_APISERVER_FLAGS (words, none with spaces).

# shellcheck source=scripts/go-tools.sh
source "$root/scripts/go-tools.sh"

kubernetes_dir="$cluster_dir/kubernetes"
kubernetes_port=${REVKV_KUBERNETES_PORT:-6443}
kubernetes_controllers=${REVKV_KUBERNETES_CONTROLLERS:-*,-node-lifecycle-controller}
kubernetes_ready_timeout_seconds=${REVKV_KUBERNETES_READY_TIMEOUT:-180}
kubernetes_components=(kube-apiserver kube-controller-manager kube-scheduler)
# The ClusterIP range of Services; its first address is the `kubernetes` Service's.
kubernetes_service_range=10.96.0.0/16
# The store's client URLs, comma-separated; empty means the members' gRPC ports.
kubernetes_etcd_servers=""

kubernetes_tools() { go_tools_dir kubernetes-1.37; }

# Builds the four binaries once; the first build compiles Kubernetes, which takes a while.
kubernetes_build() {
  if [[ ! -f "$(go_tools_dir kubernetes-1.37)/.stamp" ]]; then
    echo "building Kubernetes 1.37.2 from the Go module proxy into $(go_tools_dir kubernetes-1.37) (once)"
  fi
  go_tools_build kubernetes-1.37
}

kubernetes_is_set_up() { [[ -f "$kubernetes_dir/admin.kubeconfig" ]]; }

# Makes the certificate `$1` (files $1.pem and $1-key.pem) for subject $2, signed by the CA, with
# the extensions in $3 (one per line).
kubernetes_certificate() {
  local name=$1 subject=$2 extensions=$3
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subject" \
    -keyout "$kubernetes_dir/$name-key.pem" -out "$kubernetes_dir/$name.csr" 2>/dev/null
  openssl x509 -req -days 30 -in "$kubernetes_dir/$name.csr" -CA "$kubernetes_dir/ca.pem" \
    -CAkey "$kubernetes_dir/ca-key.pem" -CAcreateserial -out "$kubernetes_dir/$name.pem" \
    -extfile <(printf '%s\n' "$extensions" "basicConstraints=CA:FALSE" \
      "keyUsage=critical,digitalSignature") 2>/dev/null
  rm -f "$kubernetes_dir/$name.csr"
}

# A kubeconfig for the user whose client certificate is $1.pem, at $1.kubeconfig.
kubernetes_kubeconfig() {
  local name=$1 directory
  directory=$(cd "$kubernetes_dir" && pwd)
  cat >"$kubernetes_dir/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: revkv
  cluster:
    server: https://127.0.0.1:$kubernetes_port
    certificate-authority: $directory/ca.pem
users:
- name: $name
  user:
    client-certificate: $directory/$name.pem
    client-key: $directory/$name-key.pem
contexts:
- name: revkv
  context:
    cluster: revkv
    user: $name
current-context: revkv
EOF
}

# The CA, the certificates, the service-account keys and the kubeconfigs, made once per cluster
# directory; admin.kubeconfig goes last, as its presence marks the set as complete.
kubernetes_set_up() {
  kubernetes_is_set_up && return 0
  if ! command -v openssl >/dev/null 2>&1; then
    echo "openssl is needed for --kubernetes (Debian: apt-get install openssl)" >&2
    exit 1
  fi
  mkdir -p "$kubernetes_dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj "/CN=revkv kubernetes throw-away CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$kubernetes_dir/ca-key.pem" -out "$kubernetes_dir/ca.pem" 2>/dev/null
  kubernetes_certificate apiserver "/CN=kube-apiserver" "$(printf '%s\n' \
    "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
    "extendedKeyUsage=serverAuth")"
  kubernetes_certificate admin "/O=system:masters/CN=kubernetes-admin" "extendedKeyUsage=clientAuth"
  kubernetes_certificate controller-manager "/CN=system:kube-controller-manager" \
    "extendedKeyUsage=clientAuth"
  kubernetes_certificate scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 \
    -out "$kubernetes_dir/service-account-key.pem" 2>/dev/null
  openssl pkey -in "$kubernetes_dir/service-account-key.pem" -pubout \
    -out "$kubernetes_dir/service-account.pem" 2>/dev/null
  kubernetes_kubeconfig controller-manager
  kubernetes_kubeconfig scheduler
  kubernetes_kubeconfig admin
  echo "made a throw-away CA, certificates, service-account keys and kubeconfigs in $kubernetes_dir"
}

# The API server's flags for reaching the members: their gRPC URLs and, with --tls, the CA and
# member 1's certificate as its client certificate.
kubernetes_etcd_flags() {
  if [[ -n "$kubernetes_etcd_servers" ]]; then
    printf '%s\n' "--etcd-servers=$kubernetes_etcd_servers"
    return
  fi
  local servers="" id
  for id in "${members[@]}"; do servers+="${servers:+,}$(scheme)://127.0.0.1:720$id"; done
  printf '%s\n' "--etcd-servers=$servers"
  if uses_tls; then
    local tls
    tls=$(cd "$tls_dir" && pwd)
    printf '%s\n' "--etcd-cafile=$tls/ca.pem" "--etcd-certfile=$tls/member-1.pem" \
      "--etcd-keyfile=$tls/member-1-key.pem"
  fi
}

# The flags of component $1, one per line.
kubernetes_flags() {
  local directory
  directory=$(cd "$kubernetes_dir" && pwd)
  case "$1" in
    kube-apiserver)
      kubernetes_etcd_flags
      printf '%s\n' "--bind-address=127.0.0.1" "--secure-port=$kubernetes_port" \
        "--advertise-address=127.0.0.1" "--endpoint-reconciler-type=none" \
        "--tls-cert-file=$directory/apiserver.pem" "--tls-private-key-file=$directory/apiserver-key.pem" \
        "--client-ca-file=$directory/ca.pem" "--authorization-mode=RBAC" \
        "--disable-admission-plugins=TaintNodesByCondition" \
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local" \
        "--service-account-key-file=$directory/service-account.pem" \
        "--service-account-signing-key-file=$directory/service-account-key.pem" \
        "--service-cluster-ip-range=$kubernetes_service_range"
      # shellcheck disable=SC2086 # a list of flags on purpose
      if [[ -n "${REVKV_KUBERNETES_APISERVER_FLAGS:-}" ]]; then printf '%s\n' $REVKV_KUBERNETES_APISERVER_FLAGS; fi
      ;;
    kube-controller-manager)
      printf '%s\n' "--kubeconfig=$directory/controller-manager.kubeconfig" \
        "--authentication-kubeconfig=$directory/controller-manager.kubeconfig" \
        "--authorization-kubeconfig=$directory/controller-manager.kubeconfig" \
        "--bind-address=127.0.0.1" "--controllers=$kubernetes_controllers" \
        "--service-account-private-key-file=$directory/service-account-key.pem" \
        "--root-ca-file=$directory/ca.pem" "--use-service-account-credentials=true" \
        "--cluster-signing-cert-file=$directory/ca.pem" \
        "--cluster-signing-key-file=$directory/ca-key.pem"
      ;;
    kube-scheduler)
      printf '%s\n' "--kubeconfig=$directory/scheduler.kubeconfig" \
        "--authentication-kubeconfig=$directory/scheduler.kubeconfig" \
        "--authorization-kubeconfig=$directory/scheduler.kubeconfig" "--bind-address=127.0.0.1"
      ;;
  esac
}

kubernetes_pid_file() { echo "$kubernetes_dir/$1.pid"; }

kubernetes_is_running() {
  local pid_path
  pid_path=$(kubernetes_pid_file "$1")
  [[ -f "$pid_path" ]] && kill -0 "$(cat "$pid_path")" 2>/dev/null
}

kubernetes_start() {
  local component=$1 tools flags
  tools=$(kubernetes_tools)
  if kubernetes_is_running "$component"; then
    echo "$component already running (pid $(cat "$(kubernetes_pid_file "$component")"))"
    return
  fi
  mapfile -t flags < <(kubernetes_flags "$component")
  nohup "$tools/$component" "${flags[@]}" \
    >"$kubernetes_dir/$component.log" 2>&1 &
  echo $! >"$(kubernetes_pid_file "$component")"
}

# Polls command "$2..." until it succeeds, while component $1 runs, within the deadline.
kubernetes_wait_for() {
  local component=$1 what=$2
  shift 2
  local deadline=$((SECONDS + kubernetes_ready_timeout_seconds))
  until "$@" >/dev/null 2>&1; do
    if ! kubernetes_is_running "$component"; then
      echo "$component exited; see $kubernetes_dir/$component.log" >&2
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      echo "$what within ${kubernetes_ready_timeout_seconds}s: no; see $kubernetes_dir/$component.log" >&2
      exit 1
    fi
    sleep 0.2
  done
}

kubernetes_kubectl() {
  "$(kubernetes_tools)/kubectl" --kubeconfig "$kubernetes_dir/admin.kubeconfig" "$@"
}

# Starts the control plane on the running members and waits until the API server is ready, the
# controller manager and the scheduler are healthy, and the controller manager has made the
# default namespace's service account (without it no Pod can be created there).
kubernetes_up() {
  kubernetes_build
  kubernetes_set_up
  kubernetes_start kube-apiserver
  kubernetes_wait_for kube-apiserver "kube-apiserver ready" kubernetes_kubectl get --raw /readyz
  kubernetes_start kube-controller-manager
  kubernetes_start kube-scheduler
  kubernetes_wait_for kube-controller-manager "kube-controller-manager healthy" \
    curl -sfk https://127.0.0.1:10257/healthz
  kubernetes_wait_for kube-scheduler "kube-scheduler healthy" curl -sfk https://127.0.0.1:10259/healthz
  kubernetes_wait_for kube-controller-manager "the default service account" \
    kubernetes_kubectl get serviceaccount default
  echo "Kubernetes 1.37.2 ready on revkv: https://127.0.0.1:$kubernetes_port"
  echo "  kubeconfig: $kubernetes_dir/admin.kubeconfig (eval \"\$(scripts/cluster.sh env)\" sets KUBECONFIG and puts kubectl on PATH)"
}

# Stops the control plane, the clients first, before the members it stores its objects in.
kubernetes_down() {
  local component pid_path
  for component in kube-scheduler kube-controller-manager kube-apiserver; do
    pid_path=$(kubernetes_pid_file "$component")
    [[ -f "$pid_path" ]] || continue
    stop_process "$(cat "$pid_path")" && echo "$component stopped"
    rm -f "$pid_path"
  done
}

# KUBECONFIG and the private kubectl's directory, for `env`, once a control plane was set up.
kubernetes_environment() {
  kubernetes_is_set_up || return 0
  printf 'export PATH=%q:"$PATH"\n' "$(kubernetes_tools)"
  printf 'export KUBECONFIG=%q\n' "$(cd "$kubernetes_dir" && pwd)/admin.kubeconfig"
}
