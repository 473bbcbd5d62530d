//! Leases on a real three-member cluster of `revkv serve` processes (issue 13): a lease's keys
//! disappear after its TTL and not before; a keep-alive sent through a follower holds them past
//! the TTL; a revoke deletes every attached key in one revision, which a watcher receives as one
//! message; and across a leader transfer and a leader kill a lease still expires no earlier than
//! its TTL and no later than the new leader's takeover + TTL + the documented slack.
//!
//! Every bound is checked from this process's own clock, conservatively: a key seen gone in an
//! answer received at time t means the revoke happened before t, so t must be past the earliest
//! allowed expiry; a key seen present in a read sent at time t means the revoke had not happened
//! at t, so t must be before the latest allowed expiry.

mod process_cluster;

use std::time::Duration;

use process_cluster::{cluster_options, wait_until, MemberClient, ProcessCluster};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::time::Instant;

/// The slack docs/ARCHITECTURE.md ("Leases") documents past a lease's deadline: the leader's
/// expiry check interval (250 ms) plus one raft round to commit and apply the revoke, with room
/// for a loaded test machine.
const EXPIRY_SLACK: Duration = Duration::from_secs(3);

/// How often a test looks at a key while waiting for it to expire.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Grants a lease through `client` and answers its id; the TTL must be at least the minimum (1 s
/// with the harness's 300 ms election timeout), so it is granted as asked.
async fn grant(client: &MemberClient, ttl_seconds: i64) -> i64 {
    let granted = client
        .post("/v1/leases", json!({ "ttl": ttl_seconds }))
        .await
        .expect_ok("grant a lease");
    assert_eq!(granted.json["ttl"], ttl_seconds, "granted as asked");
    granted.json["id"].as_i64().expect("a numeric lease id")
}

async fn put_with_lease(client: &MemberClient, key: &str, lease: i64) -> u64 {
    let body = json!({ "value": "alive", "lease": lease });
    client
        .send(Method::PUT, &format!("/v1/kv/{key}"), Some(body), &[])
        .await
        .expect_ok(format_args!("put {key} with lease {lease}"))
        .revision()
}

/// Polls `key` through `client` until it is gone, checking every observation against the bounds:
/// gone no earlier than `not_before`, present no later than `not_after`. Answers when it saw the
/// key gone. Errors while the cluster elects a leader are skipped, until `not_after` passes.
async fn observe_expiry(client: &MemberClient, key: &str, not_before: Instant, not_after: Instant) {
    let path = format!("/v1/kv/{key}");
    loop {
        let sent = Instant::now();
        let answer = client.try_send(Method::GET, &path, None, &[]).await;
        let received = Instant::now();
        match answer {
            Ok(answer) if answer.status == StatusCode::NOT_FOUND => {
                assert!(
                    received >= not_before,
                    "{key} was gone {:?} before its lease could expire",
                    not_before - received
                );
                return;
            }
            Ok(answer) if answer.status == StatusCode::OK => assert!(
                sent <= not_after,
                "{key} was still there {:?} after its TTL plus the slack",
                sent - not_after
            ),
            // Unavailable while a new leader is elected, or no answer from a member on its way
            // down: nothing learned about the key, but the latest expiry still holds.
            _ => assert!(
                sent <= not_after,
                "no answer about {key} by the latest expiry"
            ),
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The running members of `cluster` other than `leader`.
async fn followers(cluster: &ProcessCluster, leader: u64) -> Vec<u64> {
    let running = cluster.running_ids();
    running.into_iter().filter(|id| *id != leader).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_expires_after_its_ttl_and_a_keep_alive_through_a_follower_holds_it() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let leader = cluster.leader().await;
    let follower = followers(&cluster, leader).await[0];
    let through_follower = cluster.client(follower);

    // Expiry: granted through a follower, attached through the leader, read through the other.
    let ttl = Duration::from_secs(2);
    let grant_sent = Instant::now();
    let expiring = grant(&through_follower, 2).await;
    let grant_answered = Instant::now();
    put_with_lease(&cluster.client(leader), "expire/a", expiring).await;
    let reader = cluster.client(followers(&cluster, leader).await[1]);
    observe_expiry(
        &reader,
        "expire/a",
        grant_sent + ttl,
        grant_answered + ttl + EXPIRY_SLACK,
    )
    .await;
    let gone = reader.get(&format!("/v1/leases/{expiring}")).await;
    gone.expect_error(StatusCode::NOT_FOUND, "not_found", &[]);

    // Keep-alive through a follower for three TTLs: the key stays.
    let kept = grant(&through_follower, 2).await;
    put_with_lease(&through_follower, "kept/a", kept).await;
    let keep_alive_path = format!("/v1/leases/{kept}/keepalive");
    let holding_until = Instant::now() + ttl * 3;
    let mut last_renewal = (Instant::now(), Instant::now());
    // The client's renewal cadence: well inside the TTL, as a keep-alive client would renew.
    let mut renewals = tokio::time::interval(Duration::from_millis(400));
    while Instant::now() < holding_until {
        renewals.tick().await;
        let sent = Instant::now();
        let renewed = through_follower
            .post(&keep_alive_path, json!({}))
            .await
            .expect_ok("keep-alive through a follower");
        last_renewal = (sent, Instant::now());
        assert_eq!(
            (renewed.json["id"].as_i64(), renewed.json["ttl"].as_i64()),
            (Some(kept), Some(2))
        );
        let read = reader.get_key("kept/a", "").await;
        assert_eq!(read.status, StatusCode::OK, "kept/a lives while kept alive");
    }
    let ttl_answer = reader
        .get(&format!("/v1/leases/{kept}?keys=true"))
        .await
        .expect_ok("time-to-live");
    assert_eq!(ttl_answer.json["granted_ttl"], 2);
    assert_eq!(ttl_answer.json["keys"], json!(["kept/a"]));
    let (renewal_sent, renewal_answered) = last_renewal;
    observe_expiry(
        &reader,
        "kept/a",
        renewal_sent + ttl,
        renewal_answered + ttl + EXPIRY_SLACK,
    )
    .await;
    let late = through_follower.post(&keep_alive_path, json!({})).await;
    late.expect_error(StatusCode::NOT_FOUND, "not_found", &[]);
    let last = cluster.wait_for_same_revision(&cluster.ids(), 1).await;
    cluster.assert_same_hash(&cluster.ids(), last).await;
}

/// Reads NDJSON messages from a watch stream until one of type `EVENTS` arrives (bounded).
async fn next_events_message(stream: &mut reqwest::Response, buffer: &mut Vec<u8>) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        while let Some(end) = buffer.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let message: Value = serde_json::from_slice(&line).expect("a JSON line");
            if message["type"] == "EVENTS" {
                return message;
            }
        }
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .expect("an EVENTS message in time")
            .expect("the watch stream stays open")
            .expect("the watch stream does not end");
        buffer.extend_from_slice(&chunk);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_deletes_its_keys_in_one_revision_that_a_watcher_receives_as_one_message() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let leader = cluster.leader().await;
    let follower = followers(&cluster, leader).await[0];
    let lease = grant(&cluster.client(leader), 60).await;
    let ids = cluster.ids();
    let mut last_put = 0;
    for (index, key) in ["svc/b", "svc/a", "svc/c"].into_iter().enumerate() {
        last_put = put_with_lease(&cluster.client(ids[index]), key, lease).await;
    }
    cluster.client(leader).put_ok("svc/unleased", "stays").await;

    let watcher_url = format!(
        "{}/v1/watch?key=svc/&prefix=true&start_revision={}",
        cluster.client(ids[2]).base_url,
        last_put + 2
    );
    let mut stream = reqwest::get(&watcher_url).await.expect("open a watch");
    assert_eq!(stream.status(), StatusCode::OK);
    let revoked = cluster
        .client(follower)
        .delete(&format!("/v1/leases/{lease}"))
        .await
        .expect_ok("revoke through a follower");
    let revision = revoked.revision();
    assert_eq!(
        revision,
        last_put + 2,
        "the unleased put, then the revoke's one revision"
    );

    let mut buffer = Vec::new();
    let message = next_events_message(&mut stream, &mut buffer).await;
    assert_eq!(message["revision"], revision);
    let events: Vec<(String, String)> = message["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|event| {
            let kind = event["type"].as_str().unwrap().to_string();
            (kind, event["kv"]["key"].as_str().unwrap().to_string())
        })
        .collect();
    let expected: Vec<(String, String)> = ["svc/a", "svc/b", "svc/c"]
        .iter()
        .map(|key| ("DELETE".to_string(), key.to_string()))
        .collect();
    assert_eq!(
        events, expected,
        "all three deletes, in key order, in one message"
    );

    // A lease with no keys left: revoking it takes no revision.
    let empty = grant(&cluster.client(follower), 60).await;
    let before = cluster.client(leader).get("/v1/status").await.revision();
    let revoked_empty = cluster
        .client(leader)
        .delete(&format!("/v1/leases/{empty}"))
        .await
        .expect_ok("revoke an empty lease");
    assert_eq!(revoked_empty.revision(), before);
    let listed = cluster
        .client(ids[2])
        .get("/v1/leases")
        .await
        .expect_ok("list");
    assert_eq!(listed.json["leases"], json!([]));
    let kept = cluster.client(ids[1]).get_key("svc/unleased", "").await;
    assert_eq!(kept.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_outlives_a_leader_transfer_and_a_leader_kill_by_at_most_its_ttl_plus_slack() {
    let mut cluster = ProcessCluster::start(3, cluster_options()).await;
    let ttl_seconds = 4;
    let ttl = Duration::from_secs(ttl_seconds as u64);

    // A transfer: the new leader restarts the TTL when it takes over, not earlier.
    let leader = cluster.leader().await;
    let grant_sent = Instant::now();
    let lease = grant(&cluster.client(leader), ttl_seconds).await;
    put_with_lease(&cluster.client(leader), "transfer/a", lease).await;
    let target = followers(&cluster, leader).await[0];
    cluster
        .client(leader)
        .post("/v1/leader/transfer", json!({ "to": target }))
        .await
        .expect_ok("transfer the leadership");
    let moved = wait_until(
        "the leadership to move",
        Duration::from_secs(20),
        async || (cluster.leader().await == target).then(Instant::now),
    )
    .await;
    observe_expiry(
        &cluster.client(target),
        "transfer/a",
        grant_sent + ttl,
        moved + ttl + EXPIRY_SLACK,
    )
    .await;

    // A kill: the survivors' new leader restarts the TTL when it is elected.
    let leader = cluster.leader().await;
    let grant_sent = Instant::now();
    let lease = grant(&cluster.client(leader), ttl_seconds).await;
    put_with_lease(&cluster.client(leader), "kill/a", lease).await;
    cluster.kill(leader);
    let survivors = cluster.running_ids();
    cluster.wait_for_leader(&survivors).await;
    let elected = Instant::now();
    observe_expiry(
        &cluster.client(survivors[0]),
        "kill/a",
        grant_sent + ttl,
        elected + ttl + EXPIRY_SLACK,
    )
    .await;
    let last = cluster.wait_for_same_revision(&survivors, 1).await;
    cluster.assert_same_hash(&survivors, last).await;
}
