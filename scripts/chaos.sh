#!/usr/bin/env bash
# The fault-injection harness: builds the release binary, then runs `revkv chaos` with the given
# options against a three-member cluster of its own (separate processes behind link proxies, on
# free loopback ports; nothing else needs to run).
#
#   scripts/chaos.sh                       a one-minute run with a seed from the clock
#   scripts/chaos.sh --duration 10m        a longer run
#   scripts/chaos.sh --seed 42             replay the fault schedule of seed 42
#   scripts/chaos.sh --help                every option
#
# Exit status 0 means the checkers found nothing; the report says what ran and what was injected.
# A failed run keeps the members' data and logs and prints where they are.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root" && cargo build --release --quiet -p revkv --bin revkv)
exec "${CARGO_TARGET_DIR:-$root/target}/release/revkv" chaos "$@"
