#!/usr/bin/env bash
# The project's one test command (README.md names it; .ci/run runs it): formatting, lints, the
# documentation checks, README's tour, and every test of the workspace in release mode (the `release-tests` profile: release without
# link-time optimisation, Cargo.toml says why), closing with one line that totals the results.
# It first installs what the tests need when it is missing (scripts/install-test-deps.sh), so a
# newcomer's run is CI's.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the user runs must be the same after the install: the PyPI tools go into a private
# directory, so the user's Python keeps its packages and `etcd`, `etcdctl`, `st` resolve as before.
# The allowed changes are Debian's own etcd 3.4 where there was no etcd at all, and, where the
# user's python3 is Debian's own, the Debian Python modules that Debian's patroni package brings
# (new packages only: an upgrade of one the user had is still reported).
environment_before=$(scripts/user-environment.sh)
scripts/install-test-deps.sh
environment_after=$(scripts/user-environment.sh)
if ! diff <(echo "$environment_before") <(echo "$environment_after") | grep -E '^[<>]' |
  grep -v -E '^< (etcd|etcdctl): none$|^> (etcd|etcdctl): /usr/bin/(etcd|etcdctl)$' |
  grep -v -E '^> python package: (patroni|python-etcd|psycopg2|cdiff|prettytable|psutil|dnspython|wcwidth|colorama|click|python-dateutil|urllib3)==' |
  grep -q .; then
  echo "test: the user's environment is unchanged by the install"
else
  echo "test: scripts/install-test-deps.sh changed the user's environment:" >&2
  diff <(echo "$environment_before") <(echo "$environment_after") >&2 || true
  exit 1
fi

cargo fmt --all -- --check
# Every production source file must be in docs/ARCHITECTURE.md's code map (after a self-test that
# shows the check catching a planted unmapped file).
scripts/check-code-map.py --self-test
# docs/API.md must have a row for every operation of the OpenAPI document, and no other.
scripts/check-api-doc.py --self-test
# docs/BENCHMARKS.md is the one page a newcomer reads for speed: under 300 lines, the history of
# earlier runs in dated files under docs/benchmarks/ that it links to.
benchmarks_page_lines=$(wc -l <docs/BENCHMARKS.md)
if ((benchmarks_page_lines >= 300)); then
  echo "test: docs/BENCHMARKS.md has $benchmarks_page_lines lines; keep it under 300 and move history into docs/benchmarks/" >&2
  exit 1
fi
# No circle of imports between the files of a crate (after a self-test with a planted one).
scripts/check-import-circles.py --self-test
# The server binary is built without test-only features (tokio's test-util stays the simulator's).
scripts/check-shipped-features.sh --self-test
# The revkv binary builds without a system protoc, as the quick start promises: no dependency of
# it runs the machine's protoc, and revkv-etcd-proto's build script runs with no protoc on the
# PATH (after a self-test that catches the tests' etcd-client and a build script sent to look for
# protoc).
scripts/check-protoc-free-build.sh --self-test
# The tests do need one, for the etcd-client crate's build script: this says exactly what to
# install when protoc or its well-known types are missing (after a self-test with a missing
# compiler and one without them), before clippy's build would fail inside that build script.
scripts/check-protoc.sh --self-test
cargo clippy --workspace --all-targets --profile release-tests -- -D warnings

test_log=$(mktemp)
trap 'rm -f "$test_log"' EXIT
cargo test --workspace --profile release-tests 2>&1 | tee "$test_log"
# README's tour and the guides' examples, run as written on new quick-start clusters, every answer
# compared with the one the docs show (after a self-test that shows the checker catching a planted
# wrong answer). It builds the quick start's own `quick` profile, as `scripts/cluster.sh up` does.
scripts/check-doc-examples.sh --self-test

# Kubernetes' own storage tests (k8s.io/apiserver v0.37.2's pkg/storage/etcd3 and cacher) on
# fresh revkv clusters and, as controls, etcd 3.6 and 3.7: every test that passes on either etcd
# must pass on revkv (docs/guide/kubernetes.md). Its closing counts join the total below.
scripts/kubernetes-storage-tests.sh 2>&1 | tee -a "$test_log"
scripts/kubernetes-e2e.sh
# The Go of cluster/go: gofmt and go vet clean (after the tests, whose build warms the cache vet
# reads).
unformatted_go=$(gofmt -l cluster/go)
if [[ -n "$unformatted_go" ]]; then
  echo "test: gofmt would change: $unformatted_go" >&2
  exit 1
fi
for module in apiserver-storage-tests kubernetes-e2e kubernetes-bench controller-bench; do
  (source scripts/go-tools.sh && cd "cluster/go/$module" && go_tools_go vet ./...)
done
# The client-go twin of the Rust example controller (scripts/bench-controller.sh): its unit tests
# (key mapping, the owner index, the status rewrite), which need no cluster.
(source scripts/go-tools.sh && cd cluster/go/controller-bench && go_tools_go test ./...)

# cargo prints one "test result:" line per test binary; the last one is often a crate's empty
# doc-test run, so add them all up into a closing line that says what ran.
awk '/^kubernetes-storage-tests: revkv totals:/ { passed += $4; failed += $6; ignored += $8 }
     /^test result:/ {
       for (i = 1; i <= NF; i++) {
         if ($(i) ~ /^passed;?$/)  passed  += $(i-1)
         if ($(i) ~ /^failed;?$/)  failed  += $(i-1)
         if ($(i) ~ /^ignored;?$/) ignored += $(i-1)
       }
     }
     END { printf "tests: %d passed, %d failed, %d skipped\n", passed, failed, ignored }' "$test_log"
