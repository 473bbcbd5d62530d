//! Replication across a real three-member cluster of `revkv serve` processes: writes through any
//! member reach every member with equal replica hashes, linearizable reads on a follower see writes
//! acknowledged by another member, serializable reads on one member never go backwards, and
//! `min_revision` on a lagging member waits until that revision is applied.

use crate::process_cluster;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use process_cluster::{cluster_options, ProcessCluster, CONVERGENCE_TIMEOUT};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The `(key, value, create_revision, mod_revision, version)` of every key under `prefix`, read
/// locally (serializable) on one member.
async fn local_range(client: &process_cluster::MemberClient, prefix: &str) -> Vec<Value> {
    let answer = client
        .get(&format!("/v1/kv?prefix={prefix}&consistency=serializable"))
        .await
        .expect_ok(format_args!("range {prefix} on member {}", client.id));
    assert_eq!(answer.json["more"], false, "one page holds the test's keys");
    answer.json["kvs"].as_array().expect("kvs").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_every_member_reach_every_member_with_equal_hashes() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let ids = cluster.ids();
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    let mut last_revision = 0;
    for round in 0..8 {
        for &writer in &ids {
            let client = cluster.client(writer);
            let key = format!("rep/{writer}/{round}");
            let value = format!("value {round} written through member {writer}");
            let revision = client.put_ok(&key, &value).await;
            assert!(revision > last_revision, "every write takes a new revision");
            last_revision = revision;
            expected.insert(key, value);
        }
    }
    // Deletes and a txn, each through a different member, so every request kind is forwarded.
    let deleted = cluster
        .client(ids[1])
        .delete("/v1/kv/rep/1?prefix=true")
        .await
        .expect_ok("delete a prefix through member 2");
    assert_eq!(deleted.json["deleted"], 8);
    expected.retain(|key, _| !key.starts_with("rep/1/"));
    last_revision = deleted.revision();
    let txn = json!({
        "compare": [{"key": "rep/2/0", "target": "version", "op": "=", "value": 1}],
        "success": [
            {"put": {"key": "rep/txn/a", "value": "txn a"}},
            {"put": {"key": "rep/2/0", "value": "rewritten by a txn"}},
            {"delete": {"key": "rep/3/0"}}
        ],
        "failure": []
    });
    let txn = cluster
        .client(ids[2])
        .post("/v1/txn", txn)
        .await
        .expect_ok("txn through member 3");
    assert_eq!(txn.json["succeeded"], true);
    assert_eq!(
        txn.revision(),
        last_revision + 1,
        "a txn takes one revision"
    );
    last_revision = txn.revision();
    expected.insert("rep/txn/a".into(), "txn a".into());
    expected.insert("rep/2/0".into(), "rewritten by a txn".into());
    expected.remove("rep/3/0");

    let revision = cluster.wait_for_same_revision(&ids, last_revision).await;
    assert_eq!(revision, last_revision, "nothing else changed the store");
    cluster.assert_same_hash(&ids, revision).await;
    cluster.assert_same_hash(&ids, revision / 2).await;

    let reference = local_range(&cluster.client(ids[0]), "rep/").await;
    let as_map: BTreeMap<String, String> = reference
        .iter()
        .map(|kv| {
            let text = |name: &str| kv[name].as_str().expect("text").to_string();
            (text("key"), text("value"))
        })
        .collect();
    assert_eq!(as_map, expected, "member 1 holds exactly what was written");
    for &id in &ids[1..] {
        let kvs = local_range(&cluster.client(id), "rep/").await;
        assert_eq!(
            kvs, reference,
            "member {id} holds the same keys with the same revisions and versions"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linearizable_read_on_a_follower_sees_a_write_acknowledged_by_another_member() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let leader = cluster.leader().await;
    let ids = cluster.ids();
    let followers: Vec<u64> = ids.iter().copied().filter(|id| *id != leader).collect();
    for round in 0..40usize {
        let writer = ids[round % ids.len()];
        // A follower other than the writer; alternate between the followers when the leader writes.
        let readers: Vec<u64> = followers
            .iter()
            .copied()
            .filter(|id| *id != writer)
            .collect();
        let reader = readers[round % readers.len()];
        let value = format!("round {round} through member {writer}");
        let written = cluster.client(writer).put_ok("lin/key", &value).await;
        let read = cluster
            .client(reader)
            .get_key("lin/key", "")
            .await
            .expect_ok(format_args!("linearizable read on member {reader}"));
        assert_eq!(
            read.json["kv"]["value"], value,
            "round {round}: member {reader} read after member {writer}'s acknowledged write"
        );
        assert_eq!(read.json["kv"]["mod_revision"], written);
        assert!(read.revision() >= written);
        assert_eq!(read.json["header"]["member_id"], reader);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_reads_on_one_member_never_go_backwards_while_writes_stream_through_others() {
    const WRITES: usize = 150;
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let leader = cluster.leader().await;
    let reader_id = *cluster
        .ids()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    let writers: Vec<_> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != reader_id)
        .map(|id| cluster.client(id))
        .collect();
    let first = writers[0].put_ok("mono/key", "0").await;
    let reader = cluster.client(reader_id);
    // The reader must have applied the key before the stream starts, so that every read finds it.
    reader
        .get_key(
            "mono/key",
            &format!("consistency=serializable&min_revision={first}"),
        )
        .await
        .expect_ok("the first value on the reader");

    let writing_done = Arc::new(AtomicBool::new(false));
    let writer_task = tokio::spawn({
        let writing_done = writing_done.clone();
        async move {
            let mut last = 0;
            for write in 1..=WRITES {
                let client = &writers[write % writers.len()];
                last = client.put_ok("mono/key", &write.to_string()).await;
            }
            writing_done.store(true, Ordering::SeqCst);
            last
        }
    });
    let reader_task = tokio::spawn({
        let reader = reader.clone();
        async move {
            let (mut last_header, mut last_mod, mut reads, mut distinct) = (0, 0, 0usize, 0usize);
            let mut finishing_reads = 0;
            // Keep reading a little after the writer stops, to see the last revisions arrive.
            while finishing_reads < 20 {
                if writing_done.load(Ordering::SeqCst) {
                    finishing_reads += 1;
                }
                let answer = reader
                    .get_key("mono/key", "consistency=serializable")
                    .await
                    .expect_ok("a serializable read on the reader");
                let header = answer.revision();
                let kv_mod = answer.json["kv"]["mod_revision"].as_u64().expect("kv");
                assert!(
                    header >= last_header,
                    "read {reads}: header.revision went back from {last_header} to {header}"
                );
                assert!(
                    kv_mod >= last_mod,
                    "read {reads}: mod_revision went back from {last_mod} to {kv_mod}"
                );
                assert!(kv_mod <= header, "a value is never newer than its read");
                if kv_mod > last_mod {
                    distinct += 1;
                }
                (last_header, last_mod) = (header, kv_mod);
                reads += 1;
            }
            (reads, distinct, last_mod)
        }
    });
    let last_written = writer_task.await.expect("the writer task");
    let (reads, distinct_values_seen, _) = reader_task.await.expect("the reader task");
    assert!(
        distinct_values_seen >= 2,
        "the reader saw the value move ({reads} reads, {distinct_values_seen} distinct values)"
    );
    let converged = cluster
        .wait_for_same_revision(&cluster.ids(), last_written)
        .await;
    assert_eq!(converged, last_written);
    assert_eq!(
        reader.local_value("mono/key").await,
        Some(WRITES.to_string())
    );
}

/// Sends one raw HTTP/1.1 GET and returns once the request bytes are written to the socket (the
/// kernel accepts the connection and buffers the bytes even while the member is frozen).
async fn send_raw_get(address: std::net::SocketAddr, target: &str) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect to the member");
    let request = format!("GET {target} HTTP/1.1\r\nHost: revkv\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    stream
}

/// Reads the whole answer of a `Connection: close` request: the status and the JSON body.
async fn read_raw_answer(mut stream: tokio::net::TcpStream) -> (u16, Value) {
    let mut raw = Vec::new();
    tokio::time::timeout(CONVERGENCE_TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .expect("the member answers in time")
        .expect("read the answer");
    let text = String::from_utf8(raw).expect("a UTF-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.split(' ').nth(1).expect("a status").parse().unwrap();
    (status, serde_json::from_str(body).expect("a JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_revision_on_a_lagging_member_waits_until_that_revision_is_applied() {
    let mut cluster = ProcessCluster::start(3, cluster_options()).await;
    let leader = cluster.leader().await;
    let ids = cluster.ids();
    let lagging = *ids.iter().find(|id| **id != leader).expect("a follower");
    let other_follower = *ids
        .iter()
        .find(|id| **id != leader && **id != lagging)
        .expect("a second follower");

    // On an up-to-date member: read-your-writes through another member.
    let written = cluster.client(leader).put_ok("min/key", "first").await;
    let read = cluster
        .client(other_follower)
        .get_key(
            "min/key",
            &format!("consistency=serializable&min_revision={written}"),
        )
        .await
        .expect_ok("min_revision on an up-to-date follower");
    assert!(read.revision() >= written);
    assert_eq!(read.json["kv"]["value"], "first");

    // Freeze one follower; the other two still form a quorum and acknowledge a write it lacks.
    cluster.pause(lagging);
    let lagging_revision = cluster
        .client(other_follower)
        .put_ok("min/key", "second")
        .await;
    let target = format!("/v1/kv/min/key?consistency=serializable&min_revision={lagging_revision}");
    // The request reaches the frozen member before it can have applied the write; it must wait
    // for the write to arrive instead of answering its older state.
    let pending = send_raw_get(cluster.member(lagging).client_address, &target).await;
    cluster.resume(lagging);
    let (status, body) = read_raw_answer(pending).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["header"]["revision"].as_u64().expect("a header") >= lagging_revision,
        "{body}"
    );
    assert_eq!(body["header"]["member_id"], lagging);
    assert_eq!(body["kv"]["value"], "second");
    assert_eq!(body["kv"]["mod_revision"], lagging_revision);

    // And the member keeps serving normally afterwards.
    let after = cluster.client(lagging).get_key("min/key", "").await;
    assert_eq!(after.status, StatusCode::OK);
    assert_eq!(after.json["kv"]["value"], "second");
}
