#!/usr/bin/env bash
# Measures restoring a large etcd snapshot (issue 34): a one-member revkv is filled with KEYS
# distinct keys (100-byte values, 64 clients), saved as an etcd snapshot with `revkv ctl snapshot
# save --format etcd`, checked by etcd's own `snapshot status`, and then restored three ways from
# the same file: etcd 3.4's `etcdctl snapshot restore`, etcd 3.5.1's `etcdutl snapshot restore`,
# and `revkv snapshot restore`. Prints each restore's wall time and peak RSS (GNU time). Not part
# of the test suite: it takes minutes and about a GiB of disk.
#
#   scripts/measure-etcd-restore.sh [KEYS]     (default 1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
keys=${1:-1000000}
binary=${REVKV_BINARY:-target/release/revkv}
source scripts/private-tools.sh
private_tools_install_etcd35 >/dev/null
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

"$binary" serve --id 1 --data-dir "$work/source" --listen-client 127.0.0.1:7611 \
  --listen-peer 127.0.0.1:7621 --initial-cluster 1=http://127.0.0.1:7621 \
  --quota-backend-bytes 8589934592 >"$work/source.log" 2>&1 &
for _ in $(seq 600); do
  curl -sf http://127.0.0.1:7611/readyz >/dev/null && break
  sleep 0.1
done
"$binary" bench put --endpoints http://127.0.0.1:7611 --clients 64 --total "$keys" \
  --value-size 100 --duration 30m >"$work/fill.txt"
"$binary" ctl --endpoints http://127.0.0.1:7611 snapshot save --format etcd "$work/etcd.db"
kill %1
wait 2>/dev/null || true
echo "snapshot: $(stat -c %s "$work/etcd.db") bytes for $keys keys"
ETCDCTL_API=3 etcdctl snapshot status "$work/etcd.db" -w table

measure() {
  local name=$1
  shift
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" >"$work/$name.log" 2>&1
  read -r seconds peak_kib <"$work/time.txt"
  printf '%-28s %8.2f s   peak RSS %6d MiB\n' "$name" "$seconds" $((peak_kib / 1024))
}
restore_flags=(--name default --initial-cluster default=http://127.0.0.1:7631
  --initial-advertise-peer-urls http://127.0.0.1:7631)
measure "etcd 3.4 etcdctl restore" env ETCDCTL_API=3 etcdctl snapshot restore "$work/etcd.db" \
  --data-dir "$work/etcd34" "${restore_flags[@]}"
measure "etcd 3.5.1 etcdutl restore" "$revkv_etcd35_dir/etcdutl" snapshot restore "$work/etcd.db" \
  --data-dir "$work/etcd35" "${restore_flags[@]}"
# revkv at its default page cache (64 MiB), then at a smaller and a larger one: with the key
# index, the cache is what bounds a restore's memory.
for cache_mib in 64 16 256; do
  measure "revkv restore, cache ${cache_mib} MiB" "$binary" snapshot restore "$work/etcd.db" \
    --data-dir "$work/revkv-$cache_mib" --id 1 --initial-cluster 1=http://127.0.0.1:7631 \
    --cache-bytes $((cache_mib * 1024 * 1024))
done
