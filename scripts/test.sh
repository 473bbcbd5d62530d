#!/usr/bin/env bash
# The project's one test command (README.md names it; .ci/run runs it): formatting, lints, and
# every test of the workspace in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo test --workspace --release
