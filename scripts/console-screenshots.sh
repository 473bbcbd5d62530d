#!/usr/bin/env bash
# Retakes the web console's screenshots in docs/console/ (README shows them): runs the console's
# end-to-end tests (node/bin/tests/console.rs), which drive a real headless Chromium against a real
# three-member cluster and write a PNG of each page where REVKV_CONSOLE_SCREENSHOTS points.
# Needs Debian's chromium and chromium-driver (scripts/install-test-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
REVKV_CONSOLE_SCREENSHOTS="$PWD/docs/console" CI=true \
  cargo test --profile release-tests -p revkv --test integration console:: -- --test-threads=1
ls -l docs/console/
