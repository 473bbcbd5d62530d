#!/usr/bin/env bash
# Runs the storage benchmarks (storage/benches/storage.rs) with criterion and prints where the
# results are. cargo bench builds with the optimised `bench` profile (it inherits `release`).
#
# Usage: scripts/bench-storage.sh [criterion arguments, e.g. a name filter such as mvcc_read]
# Honours CARGO_TARGET_DIR (criterion writes under "$CARGO_TARGET_DIR/criterion") and
# REVKV_BENCH_DIR (the parent of the benchmarks' temporary redb files; the system temporary
# directory when unset). Set both to directories on the disk you mean to measure.
set -euo pipefail

workspace_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$workspace_root"

target_directory="${CARGO_TARGET_DIR:-$workspace_root/target}"

# Build first, then flush dirty pages (the build's own output among them) so that writeback does not
# compete with the fsync-bound benchmarks while they are measured.
cargo bench -p revkv-storage --bench storage --no-run
sync
cargo bench -p revkv-storage --bench storage -- "$@"

echo
echo "criterion results (per benchmark: new/estimates.json, raw samples in new/sample.json):"
echo "  $target_directory/criterion"
if [[ -f "$target_directory/criterion/report/index.html" ]]; then
  echo "  HTML report: $target_directory/criterion/report/index.html"
fi
