#!/usr/bin/env bash
# The deterministic simulator (cluster/sim): whole revkv clusters in one process under faults
# the seed chooses. Every run is checked (linearizable histories, watches, replica hashes).
#
#   scripts/sim.sh --seeds 10000 [--first-seed N] [--faults partition,network,restart] [--jobs N]
#       soaks that many seeds in parallel over the cores and prints each failing seed with the
#       command that replays it;
#   scripts/sim.sh --replay SEED [--key sim/1] [--member 2]
#       runs one seed again, event for event, and prints its trace (narrowed to one key or one
#       member when asked).
#
# `revkv-sim --help` lists every option. The build uses the test profile (release optimisation
# without link-time optimisation): what the simulator finds does not depend on LTO, and the
# test suite has built it already.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
exec cargo run --profile release-tests --quiet -p revkv-sim -- "$@"
