#!/usr/bin/env bash
# Runs every cargo-fuzz target of raft/fuzz for a while each and prints what it found: the decoders
# of untrusted bytes (persisted records, peer messages, continue tokens, snapshot streams, log
# segments, watch resume revisions). Not part of CI (it needs nightly Rust and minutes per target);
# the results of a long run are recorded in docs/RELIABILITY.md, "Fuzzing".
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 600 s, every target)
#
# A crash leaves its input in raft/fuzz/artifacts/TARGET/; `cargo +nightly fuzz run TARGET FILE`
# replays it.
set -euo pipefail
cd "$(dirname "$0")/../raft/fuzz"

seconds=${1:-600}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(persisted_records peer_messages continue_token snapshot_stream log_segment watch_resume)
fi

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal
  cargo install cargo-fuzz --locked
fi

# The store and log targets create files per input; on tmpfs their fsyncs cost nothing.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi

# Seeds: valid encodings of everything, so mutation starts from the real formats.
cargo +nightly run --release --bin write_seeds -- corpus

for target in "${targets[@]}"; do
  echo "== $target: ${seconds}s"
  log=$(mktemp)
  if cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" -rss_limit_mb=4096 \
      >"$log" 2>&1; then
    verdict="no crash"
  else
    verdict="CRASH (see raft/fuzz/artifacts/$target)"
  fi
  runs=$(grep -o 'Done [0-9]* runs' "$log" | tail -1 || true)
  coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  corpus_files=$(find "corpus/$target" -type f | wc -l)
  echo "$target: $verdict; ${runs:-no summary}; ${coverage:-no coverage line}; corpus $corpus_files files"
  tail -5 "$log"
  rm -f "$log"
done
