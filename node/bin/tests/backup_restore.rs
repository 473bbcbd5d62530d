//! Backup and restore end to end, with real member processes: `revkv ctl snapshot save` against a
//! running three-member cluster while writes go on, `revkv snapshot status`, three members
//! restored from the file with `revkv snapshot restore`, and the new cluster started on them.
//!
//! The source holds history worth keeping: overwrites, deletes, a compaction and a lease with an
//! attached key. The new cluster must hold exactly the backup's revision: the same hash at that
//! revision on all three members and as the source's, the same key listing, historical reads
//! between the compact revision and the backup's revision, `compacted` below it, the lease and its
//! key, writes continuing above the backup's revision, and a cluster id of its own.

use crate::process_cluster;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use process_cluster::{
    cluster_options, restore_member, MemberClient, ProcessCluster, REVKV_BINARY,
};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Runs the binary with `args`; fails the test unless it exits 0; returns its stdout as JSON.
fn run_json(args: &[&str]) -> Value {
    let output = Command::new(REVKV_BINARY)
        .args(args)
        .output()
        .expect("run revkv");
    assert!(
        output.status.success(),
        "revkv {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("revkv {args:?} printed no JSON ({error})"))
}

/// Writes history under `b/`: creates, overwrites, deletes, a compaction and a leased key.
/// Answers (a revision between the compaction and the end, the compact revision, the lease id).
async fn write_history(client: &MemberClient) -> (u64, u64, i64) {
    for index in 0..20 {
        client.put_ok(&format!("b/k{index:02}"), "first").await;
    }
    for index in 0..10 {
        client.put_ok(&format!("b/k{index:02}"), "second").await;
    }
    let compact_revision = client.put_ok("b/k00", "third").await;
    client
        .post("/v1/compact", json!({ "revision": compact_revision }))
        .await
        .expect_ok("compact");
    let between = client.put_ok("b/k01", "after the compaction").await;
    for index in 15..20 {
        client
            .delete(&format!("/v1/kv/b/k{index:02}"))
            .await
            .expect_ok("delete");
    }
    client.put_ok("b/k02", "after the deletes").await;
    let lease = client
        .post("/v1/leases", json!({ "ttl": 600 }))
        .await
        .expect_ok("grant a lease");
    let lease_id = lease.json["id"].as_i64().expect("a lease id");
    let body = json!({ "value": "leased", "lease": lease_id });
    client
        .send(reqwest::Method::PUT, "/v1/kv/b/leased", Some(body), &[])
        .await
        .expect_ok("put with a lease");
    (between, compact_revision, lease_id)
}

/// Every key under `b/` at `revision` on `client` (serializable: that member's own store).
async fn listing(client: &MemberClient, revision: u64) -> Value {
    let answer = client
        .get(&format!(
            "/v1/kv?prefix=b/&revision={revision}&consistency=serializable"
        ))
        .await
        .expect_ok(format_args!("list at {revision}"));
    assert_eq!(answer.json["more"], false);
    answer.json["kvs"].clone()
}

/// Keeps writing through `client` until `stop` is set; answers how many writes it made.
fn keep_writing(client: MemberClient, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut written = 0u64;
        while !stop.load(Ordering::Relaxed) {
            client
                .put_ok(&format!("b/live{}", written % 50), "busy")
                .await;
            written += 1;
        }
        written
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_writes_restores_into_a_new_cluster_with_its_history() {
    let source = ProcessCluster::start(3, cluster_options()).await;
    let writer = source.client(1);
    let (between, compact_revision, lease_id) = write_history(&writer).await;

    let stop = Arc::new(AtomicBool::new(false));
    let writes = keep_writing(source.client(1), stop.clone());
    let directory = tempfile::tempdir().expect("a temporary directory");
    let backup = directory.path().join("backup.revkv");
    let backup_arg = backup.to_str().expect("a UTF-8 path");
    let member_2 = source.member(2).client_url();
    let saved = run_json(&[
        "ctl",
        "--endpoints",
        &member_2,
        "-o",
        "json",
        "snapshot",
        "save",
        backup_arg,
    ]);
    stop.store(true, Ordering::Relaxed);
    let concurrent_writes = writes.await.expect("the writer did not panic");
    assert!(concurrent_writes > 0, "no write ran during the backup");
    let revision = saved["revision"].as_u64().expect("a revision");
    assert_eq!(saved["member_id"], 2);
    assert!(revision > between, "{saved}");
    assert!(
        std::fs::read_dir(directory.path()).unwrap().count() == 1,
        "a temporary file is left"
    );

    let status = run_json(&["snapshot", "status", backup_arg, "-w", "json"]);
    assert_eq!(status["revision"], revision);
    assert_eq!(status["compact_revision"], compact_revision);
    assert_eq!(status["keys"], saved["keys"]);
    assert_eq!(status["checksum"], saved["checksum"]);
    assert_eq!(status["checksum_ok"], true);
    assert_eq!(status["size"], saved["bytes"]);

    let source_member = source.client(2);
    let source_listing = listing(&source_member, revision).await;
    let source_hash = source_member.hash_at(revision).await;
    assert_eq!(
        source_listing.as_array().unwrap().len() as u64,
        status["keys"].as_u64().unwrap()
    );
    let historical = source_member
        .get_key(
            "b/k01",
            &format!("revision={between}&consistency=serializable"),
        )
        .await
        .expect_ok("historical read on the source");

    let restored = ProcessCluster::start_prepared(3, cluster_options(), |id, data_dir, initial| {
        restore_member(&backup, id, data_dir, initial)
    })
    .await;
    let ids = restored.ids();
    restored.wait_for_leader(&ids).await;
    restored.wait_for_same_revision(&ids, revision).await;
    let restored_hash = restored.assert_same_hash(&ids, revision).await;
    assert_eq!(
        restored_hash, source_hash.0,
        "the restored store differs from the source"
    );
    for id in &ids {
        let client = restored.client(*id);
        assert_eq!(
            listing(&client, revision).await,
            source_listing,
            "member {id}"
        );
        let old = client
            .get_key(
                "b/k01",
                &format!("revision={between}&consistency=serializable"),
            )
            .await
            .expect_ok("historical read on the restored cluster");
        assert_eq!(old.json["kv"], historical.json["kv"]);
        let below = client
            .get_key("b/k01", &format!("revision={}", compact_revision - 1))
            .await;
        below.expect_error(StatusCode::GONE, "compacted", &["compact_revision"]);
    }

    let restored_client = restored.client(3);
    let lease = restored_client
        .get(&format!("/v1/leases/{lease_id}?keys=true"))
        .await
        .expect_ok("the restored lease");
    assert_eq!(lease.json["keys"], json!(["b/leased"]));
    let next = restored_client.put_ok("b/after-restore", "new").await;
    assert_eq!(
        next,
        revision + 1,
        "writes continue above the backup's revision"
    );

    let again = directory.path().join("restored.revkv");
    let second = run_json(&[
        "ctl",
        "--endpoints",
        &restored.member(1).client_url(),
        "-o",
        "json",
        "snapshot",
        "save",
        again.to_str().unwrap(),
    ]);
    assert_ne!(
        second["cluster_id"], saved["cluster_id"],
        "a restored cluster is a new cluster"
    );
    assert!(second["cluster_id"].is_string() && saved["cluster_id"].is_string());
}
