//! The space quota end to end, on real members: writes fill the state files past
//! `--quota-backend-bytes`, a member raises the NOSPACE alarm through raft, and every member then
//! refuses writes that grow the store (507 `no_space`) while reads and deletes go on. The operator
//! deletes, compacts, defragments (`revkv ctl defrag`), and disarms (`revkv ctl alarm disarm`);
//! writes are accepted again. `revkv_alarms{kind="NOSPACE"}` follows the alarm.

use crate::process_cluster;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use process_cluster::{cluster_options, ctl_async, wait_until, MemberClient, ProcessCluster};

/// Small enough to pass in a few hundred writes, above a fresh state file's size.
const QUOTA_BYTES: u64 = 6 * 1024 * 1024;

const VALUE_BYTES: usize = 32 * 1024;

/// Most writes before the alarm must have stopped them (the quota holds far fewer).
const MAX_WRITES: usize = 3_000;

const TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_quota_writes_stop_until_the_operator_makes_room_and_disarms() {
    let quota = QUOTA_BYTES.to_string();
    let options = cluster_options().with_flags(&["--quota-backend-bytes", &quota]);
    let cluster = ProcessCluster::start(3, options).await;
    let endpoints = cluster.client_urls().join(",");
    let client = cluster.client(1);

    let written = fill_until_refused(&client).await;
    assert!(written > 0, "some writes went in before the quota");
    for id in cluster.ids() {
        let refused = cluster.client(id).put("fill/more", "x").await;
        refused.expect_error(StatusCode::INSUFFICIENT_STORAGE, "no_space", &[]);
    }
    let alarms = ctl_async(&endpoints, &["alarm", "list"], None)
        .await
        .expect_success();
    assert!(alarms.stdout.contains("alarm:NOSPACE"), "{}", alarms.stdout);
    assert!(
        no_space_alarms(&client).await >= 1,
        "the metric shows the alarm"
    );
    assert_eq!(client.get("/v1/kv/fill/00000").await.status, StatusCode::OK);

    // Make room: delete, compact, defragment every member, then disarm.
    let deleted = client.delete("/v1/kv/fill/?prefix=true").await;
    let revision = deleted.expect_ok("delete the filler").revision();
    client
        .post("/v1/compact", json!({ "revision": revision }))
        .await
        .expect_ok("compact");
    let defragmented = ctl_async(&endpoints, &["-o", "json", "defrag"], None)
        .await
        .expect_success();
    for member in defragmented
        .json()
        .as_array()
        .expect("one answer per member")
    {
        let after = member["defragment"]["file_bytes_after"].as_u64().unwrap();
        assert!(
            after < QUOTA_BYTES,
            "defragmented below the quota: {member}"
        );
    }
    ctl_async(&endpoints, &["alarm", "disarm"], None)
        .await
        .expect_success();
    client.put_ok("after/room", "1").await;
    let listed = client.get("/v1/alarms").await;
    assert_eq!(listed.json["alarms"], json!([]), "{listed:?}");
    assert_eq!(
        no_space_alarms(&client).await,
        0,
        "the metric shows no alarm"
    );
}

/// Writes large values until the cluster refuses one with `no_space`; returns how many went in.
async fn fill_until_refused(client: &MemberClient) -> usize {
    let value = "v".repeat(VALUE_BYTES);
    let body = serde_json::to_vec(&json!({ "value": value })).expect("JSON encodes");
    for index in 0..MAX_WRITES {
        let path = format!("/v1/kv/fill/{index:05}");
        let answer = client
            .try_send(Method::PUT, &path, Some(body.clone()), &[])
            .await
            .expect("the member answers");
        match answer.status {
            StatusCode::OK => {}
            StatusCode::INSUFFICIENT_STORAGE => return index,
            other => panic!(
                "unexpected answer {other} to write {index}: {:?}",
                answer.json
            ),
        }
    }
    wait_until("a write is refused with no_space", TIMEOUT, async || {
        let answer = client.put("fill/last", "x").await;
        (answer.status == StatusCode::INSUFFICIENT_STORAGE).then_some(MAX_WRITES)
    })
    .await
}

/// The value of `revkv_alarms{kind="NOSPACE"}` in the member's metrics.
async fn no_space_alarms(client: &MemberClient) -> u64 {
    let text = client.metrics_text().await;
    let line = text
        .lines()
        .find(|line| line.starts_with("revkv_alarms{kind=\"NOSPACE\"}"))
        .unwrap_or_else(|| panic!("no revkv_alarms line in:\n{text}"));
    let value = line.rsplit(' ').next().expect("a value");
    value
        .parse()
        .unwrap_or_else(|_| panic!("not a count: {line}"))
}
