#!/usr/bin/env bash
# Runs Kubernetes' own storage tests (k8s.io/apiserver v0.37.2: pkg/storage/etcd3 and
# pkg/storage/cacher, which run the generic suite of pkg/storage/testing) against a fresh revkv
# cluster per test and, as the control, against a fresh etcd 3.6.16 cluster (etcd 3.7.3 too with
# REVKV_STORAGE_TEST_CONTROLS="etcd-3.6 etcd-3.7"), then compares them: every test that passes on
# a control must pass on revkv, and no test may fail on revkv at all, which also holds revkv to
# the RangeStream subtests (etcd 3.6 has no RangeStream, so they fail there; they pass on 3.7).
#
# kine's way: a copy of the module's source (with its own go.mod and go.sum, from the Go module
# proxy through cluster/go/apiserver-storage-tests, whose go.sum pins it) with the embedded test
# server swapped for cluster/go/apiserver-storage-tests/testserver/test_server.go, which starts
# real member processes. The test binaries are built once into the private tools directory
# (scripts/go-tools.sh) and rebuilt when the drop-in or a pin changes.
#
# A test listed in cluster/go/apiserver-storage-tests/skipped-on-revkv (each with its reason;
# docs/guide/kubernetes.md says why each is there) is reported instead of failing the run. A test
# that fails on a control is reported, not counted against revkv.
#
# usage: scripts/kubernetes-storage-tests.sh [PACKAGE...]   (etcd3, cacher; default both)
#   REVKV_BINARY                the revkv binary (default: the `quick` build, made when missing)
#   REVKV_STORAGE_TEST_MEMBERS  members of each revkv cluster (default 3)
#   REVKV_STORAGE_TEST_CONTROL_MEMBERS  members of each etcd cluster (default 1, as upstream)
#   REVKV_STORAGE_TEST_CONTROLS the control runs (default "etcd-3.6"; CI's budget has no room
#                               for a second, and the rule above holds revkv to 3.7's tests)
#   REVKV_STORAGE_TEST_RUN      a -test.run pattern, for a part of the suite
set -euo pipefail
# join and sort must agree on the order of test names.
export LC_ALL=C
cd "$(dirname "$0")/.."
root=$(pwd)
# shellcheck source=scripts/go-tools.sh
source scripts/go-tools.sh

packages=("$@")
[[ ${#packages[@]} -eq 0 ]] && packages=(etcd3 cacher)
# revkv runs as the three members Kubernetes is deployed on; the controls as upstream's embedded
# server, one member (a three-member etcd takes about 7 s to elect its first leader here, which
# would make the controls take longer than everything else CI runs).
revkv_members=${REVKV_STORAGE_TEST_MEMBERS:-3}
control_members=${REVKV_STORAGE_TEST_CONTROL_MEMBERS:-1}
read -r -a controls <<<"${REVKV_STORAGE_TEST_CONTROLS:-etcd-3.6}"
wrapper="$root/cluster/go/apiserver-storage-tests"
work=$(go_tools_dir apiserver-storage-tests)

# The revkv binary, and the etcds of the control runs.
if [[ -z "${REVKV_BINARY:-}" ]]; then
  cargo build --profile quick --quiet -p revkv --bin revkv
  REVKV_BINARY="${CARGO_TARGET_DIR:-$root/target}/quick/revkv"
fi
for control in "${controls[@]}"; do
  go_tools_build "$control"
done

# The test binaries: built from a copy of k8s.io/apiserver with the drop-in, when the copy's
# inputs changed (the pinned version, the drop-in, the Go version).
build_test_binaries() {
  local stamp
  stamp=$({
    go version
    cat "$wrapper/go.mod" "$wrapper/go.sum" "$wrapper/testserver/test_server.go"
  } | sha256sum | cut -d' ' -f1)
  if [[ -f "$work/.stamp" && "$(cat "$work/.stamp")" == "$stamp" ]]; then
    return 0
  fi
  local module_dir
  module_dir=$(cd "$wrapper" && go_tools_go list -m -f '{{.Dir}}' k8s.io/apiserver)
  if [[ -z "$module_dir" || ! -d "$module_dir" ]]; then
    (cd "$wrapper" && go_tools_go mod download k8s.io/apiserver)
    module_dir=$(cd "$wrapper" && go_tools_go list -m -f '{{.Dir}}' k8s.io/apiserver)
  fi
  rm -rf "$work/src" "$work/bin" "$work/.stamp"
  mkdir -p "$work/bin"
  cp -r "$module_dir" "$work/src"
  chmod -R u+w "$work/src"
  cp "$wrapper/testserver/test_server.go" "$work/src/pkg/storage/etcd3/testserver/test_server.go"
  local started=$SECONDS package
  for package in etcd3 cacher; do
    (cd "$work/src" && go_tools_go test -c -o "$work/bin/$package.test" "./pkg/storage/$package")
  done
  echo "$stamp" >"$work/.stamp"
  echo "kubernetes-storage-tests: built the test binaries in $((SECONDS - started)) s" >&2
}
build_test_binaries

# Runs package $1's tests against store $2 (revkv, etcd-3.6 or etcd-3.7), writing the verbose log
# to $3.
run_tests() {
  local package=$1 store=$2 log=$3 binary kind=etcd members=$control_members
  if [[ $store == revkv ]]; then
    binary=$REVKV_BINARY kind=revkv members=$revkv_members
  else
    binary="$(go_tools_dir "$store")/etcd"
  fi
  local run_flags=()
  [[ -n "${REVKV_STORAGE_TEST_RUN:-}" ]] && run_flags=(-test.run "$REVKV_STORAGE_TEST_RUN")
  # The package's own directory, as `go test` runs it (some tests read testdata).
  (cd "$work/src/pkg/storage/$package" &&
    REVKV_STORAGE_TEST_STORE=$kind REVKV_STORAGE_TEST_BINARY=$binary \
      REVKV_STORAGE_TEST_MEMBERS=$members \
      "$work/bin/$package.test" -test.v -test.parallel 1 -test.timeout 60m "${run_flags[@]}") \
    >"$log" 2>&1 || true
}

# The results of a verbose log, one "STATUS NAME" line per test and subtest.
results() {
  sed -n -E 's/^ *--- (PASS|FAIL|SKIP): ([^ ]+) .*/\1 \2/p' "$1" | sort -k2
}

# Compares package $1's logs in $logs (one per store): prints each difference that counts against
# revkv and fails when there is one.
compare_results() {
  local package=$1 failed=0 control
  for control in "${controls[@]}"; do
    # Tests that pass on the control and do not pass on revkv.
    join -1 2 -2 2 <(results "$logs/$package-$control.log" | grep '^PASS') \
      <(results "$logs/$package-revkv.log" | grep -v '^PASS') | while read -r name _ status; do
      if grep -q -x -F "$package $name" "$wrapper/skipped-on-revkv"; then
        echo "  listed as skipped on revkv: $name"
      else
        echo "  FAILED on revkv, passed on $control: $name ($status)"
      fi
    done | tee "$logs/$package-$control-differences"
    if grep -q "FAILED on revkv" "$logs/$package-$control-differences"; then failed=1; fi
    # What the control does not pass: reported, not held against revkv.
    results "$logs/$package-$control.log" | grep '^FAIL' | sed "s/^/  fails on $control: /" || true
  done
  # What fails on revkv fails the run, whatever the controls did.
  results "$logs/$package-revkv.log" | { grep '^FAIL' || true; } | while read -r _ name; do
    if grep -q -x -F "$package $name" "$wrapper/skipped-on-revkv"; then
      echo "  listed as skipped on revkv: $name"
    else
      echo "  FAILED on revkv: $name"
    fi
  done | tee "$logs/$package-revkv-failures"
  if grep -q "FAILED on revkv" "$logs/$package-revkv-failures"; then failed=1; fi
  return $failed
}

# Shows compare_results catching planted faults: a test that fails on revkv and passes on the
# control, and one that fails on revkv alone; and passing logs that agree.
self_test() {
  local saved_logs=$logs saved_controls=("${controls[@]}")
  logs=$(mktemp -d)
  controls=(etcd-3.6)
  local pass="    --- PASS: TestGet (0.01s)" fail="    --- FAIL: TestGet (0.01s)"
  local stream_fail="    --- FAIL: TestStream (0.01s)" stream_pass="    --- PASS: TestStream (0.01s)"
  printf '%s\n' "$pass" "$stream_fail" >"$logs/etcd3-etcd-3.6.log"
  printf '%s\n' "$pass" "$stream_pass" >"$logs/etcd3-revkv.log"
  if ! compare_results etcd3 >/dev/null; then
    echo "kubernetes-storage-tests: self-test: agreeing results were refused" >&2
    exit 1
  fi
  printf '%s\n' "$fail" "$stream_pass" >"$logs/etcd3-revkv.log"
  if compare_results etcd3 >/dev/null; then
    echo "kubernetes-storage-tests: self-test: a test failing on revkv and passing on etcd was not caught" >&2
    exit 1
  fi
  printf '%s\n' "$pass" "$stream_fail" >"$logs/etcd3-revkv.log"
  if compare_results etcd3 >/dev/null; then
    echo "kubernetes-storage-tests: self-test: a test failing on revkv alone was not caught" >&2
    exit 1
  fi
  rm -rf "$logs"
  logs=$saved_logs controls=("${saved_controls[@]}")
  echo "kubernetes-storage-tests: self-test: planted failures are caught"
}

logs=$(mktemp -d)
failed=0
self_test
for package in "${packages[@]}"; do
  for store in "${controls[@]}" revkv; do
    started=$SECONDS
    run_tests "$package" "$store" "$logs/$package-$store.log"
    echo "kubernetes-storage-tests: $package on $store: $(results "$logs/$package-$store.log" |
      cut -d' ' -f1 | sort | uniq -c | tr '\n' ' ')in $((SECONDS - started)) s"
  done
  compare_results "$package" || failed=1
  # A test binary that died (a panic, the timeout) reports no result for the rest.
  for store in "${controls[@]}" revkv; do
    if ! tail -n 5 "$logs/$package-$store.log" | grep -q -E '^(ok|PASS|FAIL)'; then
      echo "  $package on $store did not finish: $(tail -n 3 "$logs/$package-$store.log")"
      failed=1
    fi
  done
done
# Every test and subtest revkv ran, for scripts/test.sh's closing line.
cat "$logs"/*-revkv.log | sed -n -E 's/^ *--- (PASS|FAIL|SKIP): .*/\1/p' | sort | uniq -c |
  awk '{ count[$2] = $1 }
       END { printf "kubernetes-storage-tests: revkv totals: %d passed, %d failed, %d skipped\n",
             count["PASS"], count["FAIL"], count["SKIP"] }'
# The logs are kept only when something needs reading.
if [[ $failed -eq 0 ]]; then
  rm -rf "$logs"
else
  echo "kubernetes-storage-tests: the verbose logs are in $logs"
fi
exit $failed
