#!/usr/bin/env bash
# Prints what a user's shell resolves for the commands the test tools could shadow, and the
# packages of the user's own Python: scripts/test.sh compares it before and after
# scripts/install-test-deps.sh, which must change none of it (Debian's etcd 3.4 appearing where no
# etcd was is the one change allowed). One "name: value" line each, in a fixed order.
set -uo pipefail
for command in etcd etcdctl etcdutl st python3 pip; do
  echo "$command: $(command -v "$command" || echo none)"
done
python3 -m pip freeze --disable-pip-version-check 2>/dev/null | sed 's/^/python package: /'
