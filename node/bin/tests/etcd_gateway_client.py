"""A small put/get/watch/lease script with etcd3-py, a Python client that speaks only etcd's JSON
gateway. node/bin/tests/etcd_gateway_python.rs runs it against etcd and against revkv's gRPC
port and compares what it prints. It waits only by polling with a deadline."""

import sys
import time

from etcd3 import Client

DEADLINE_SECONDS = 20


def main(host, port):
    client = Client(host, int(port), protocol="http")
    version = client.version()
    print("cluster version", version.etcdcluster)
    client.put("foo", "bar")
    found = client.range("foo").kvs[0]
    print("range", found.key, found.value, found.version, found.create_revision == found.mod_revision)
    changed = client.put("foo", "baz", prev_kv=True)
    print("prev", changed.prev_kv.value)
    # Watch from the overwrite's revision: the event is there whenever the watch starts.
    events = []
    watcher = client.Watcher(key="foo", start_revision=changed.header.revision)
    watcher.onEvent(events.append)
    watcher.runDaemon()
    deadline = time.time() + DEADLINE_SECONDS
    while not events and time.time() < deadline:
        time.sleep(0.05)
    watcher.stop()
    print("watched", [(event.key, event.value) for event in events[:1]])
    lease = client.Lease(ttl=30)
    lease.grant()
    client.put("leased", "v", lease=lease.ID)
    print("lease has time", 0 < lease.ttl() <= 30, "keys", client.lease_time_to_live(lease.ID, keys=True).keys)
    lease.revoke()
    print("after revoke", client.range("leased").kvs)
    deleted = client.delete_range("foo", prev_kv=True)
    print("deleted", deleted.deleted, deleted.prev_kvs[0].value)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
