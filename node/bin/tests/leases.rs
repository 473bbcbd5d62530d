//! Leases on a real three-member cluster of `revkv serve` processes (issue 13): a lease's keys
//! disappear after its TTL and not before; a keep-alive sent through a follower holds them past
//! the TTL; a revoke deletes every attached key in one revision, which a watcher receives as one
//! message; and across a leader transfer, a leader kill and a storm of leader transfers (one every
//! fraction of a TTL) a lease still expires no earlier than its TTL and no later than its TTL +
//! the checkpoint interval + the documented slack, because the leader checkpoints its remaining
//! TTL through raft (without checkpoints, every new leader would restart the full TTL and the
//! storm would keep the lease alive for as long as it lasts).
//!
//! Every bound is checked from this process's own clock, conservatively: a key seen gone in an
//! answer received at time t means the revoke happened before t, so t must be past the earliest
//! allowed expiry; a key seen present in a read sent at time t means the revoke had not happened
//! at t, so t must be before the latest allowed expiry.

use crate::process_cluster;

use std::time::Duration;

use process_cluster::{cluster_options, wait_until, ClusterOptions, MemberClient, ProcessCluster};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::time::Instant;

/// The slack docs/design/leases.md ("The bound") documents past a lease's deadline: the leader's
/// expiry check interval (250 ms) plus one raft round to commit and apply the revoke, with room
/// for a loaded test machine.
const EXPIRY_SLACK: Duration = Duration::from_secs(3);

/// How often a test looks at a key while waiting for it to expire.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The lease checkpoint interval of the leader-change tests (`--lease-checkpoint-interval-ms`):
/// short, so a lease is checkpointed early in its TTL.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(500);

/// A cluster whose leaders checkpoint leases every `CHECKPOINT_INTERVAL`.
fn checkpointing_cluster_options() -> ClusterOptions {
    let mut options = cluster_options();
    options.extra_flags.push(format!(
        "--lease-checkpoint-interval-ms={}",
        CHECKPOINT_INTERVAL.as_millis()
    ));
    options
}

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
    while !observe_once(client, key, not_before, not_after).await {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Reads `key` once through `client`, checking the observation against the bounds as
/// `observe_expiry` does; answers true when the key is gone.
async fn observe_once(
    client: &MemberClient,
    key: &str,
    not_before: Instant,
    not_after: Instant,
) -> bool {
    let path = format!("/v1/kv/{key}");
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
            true
        }
        Ok(answer) if answer.status == StatusCode::OK => {
            assert!(
                sent <= not_after,
                "{key} was still there {:?} after its TTL plus the slack",
                sent - not_after
            );
            false
        }
        // Unavailable while a new leader is elected, or no answer from a member on its way
        // down: nothing learned about the key, but the latest expiry still holds.
        _ => {
            assert!(
                sent <= not_after,
                "no answer about {key} by the latest expiry"
            );
            false
        }
    }
}

/// Waits until the leader reports at most `seconds` left on lease `id` (its time-to-live answer
/// rounds up to whole seconds), late enough in the TTL that a leader restarting the full TTL
/// would keep the lease past the checkpointed bound.
async fn wait_for_remaining_ttl(client: &MemberClient, id: i64, seconds: i64) {
    let path = format!("/v1/leases/{id}");
    let what = format!("lease {id} to have at most {seconds} s left");
    wait_until(what, Duration::from_secs(30), async || {
        let answer = client.try_send(Method::GET, &path, None, &[]).await.ok()?;
        assert_eq!(answer.status, StatusCode::OK, "lease {id} is still granted");
        let remaining = answer.json["ttl"].as_i64()?;
        if remaining > seconds {
            tokio::time::sleep(POLL_INTERVAL).await;
            return None;
        }
        Some(())
    })
    .await;
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

/// Waits until the leader `client` reaches has taken lease `id` over (it answers its time-to-live
/// once it has applied an entry of its term and reset its deadlines), or the lease is gone.
async fn wait_for_takeover(client: &MemberClient, id: i64) {
    let path = format!("/v1/leases/{id}");
    let what = format!("the new leader to take lease {id} over");
    wait_until(what, Duration::from_secs(20), async || {
        let answer = client.try_send(Method::GET, &path, None, &[]).await.ok()?;
        let settled = [StatusCode::OK, StatusCode::NOT_FOUND].contains(&answer.status);
        settled.then_some(())
    })
    .await;
}

/// Moves the leadership from `leader` to `target` and answers when every running member agrees.
async fn transfer_leadership(cluster: &ProcessCluster, leader: u64, target: u64) -> Instant {
    cluster
        .client(leader)
        .post("/v1/leader/transfer", json!({ "to": target }))
        .await
        .expect_ok("transfer the leadership");
    wait_until(
        "the leadership to move",
        Duration::from_secs(20),
        async || (cluster.leader().await == target).then(Instant::now),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_outlives_a_late_leader_transfer_and_kill_by_at_most_the_checkpoint_bound() {
    let mut cluster = ProcessCluster::start(3, checkpointing_cluster_options()).await;
    let ttl_seconds = 8;
    let ttl = Duration::from_secs(ttl_seconds as u64);
    // docs/design/leases.md, "The bound": no later than r + T + checkpoint interval + slack. A new
    // leader that restarted the full TTL 6 s into it would keep the key until 6 s + T: past it.
    let latest_after = ttl + CHECKPOINT_INTERVAL + EXPIRY_SLACK;

    // A transfer two seconds before the lease's end: the new leader restarts it from its
    // checkpoint, not from its full TTL.
    let leader = cluster.leader().await;
    let grant_sent = Instant::now();
    let lease = grant(&cluster.client(leader), ttl_seconds).await;
    let grant_answered = Instant::now();
    put_with_lease(&cluster.client(leader), "transfer/a", lease).await;
    wait_for_remaining_ttl(&cluster.client(leader), lease, 2).await;
    let target = followers(&cluster, leader).await[0];
    transfer_leadership(&cluster, leader, target).await;
    observe_expiry(
        &cluster.client(target),
        "transfer/a",
        grant_sent + ttl,
        grant_answered + latest_after,
    )
    .await;

    // A kill two seconds before the lease's end: the survivors' new leader does the same.
    let leader = cluster.leader().await;
    let grant_sent = Instant::now();
    let lease = grant(&cluster.client(leader), ttl_seconds).await;
    let grant_answered = Instant::now();
    put_with_lease(&cluster.client(leader), "kill/a", lease).await;
    wait_for_remaining_ttl(&cluster.client(leader), lease, 2).await;
    cluster.kill(leader);
    let survivors = cluster.running_ids();
    cluster.wait_for_leader(&survivors).await;
    observe_expiry(
        &cluster.client(survivors[0]),
        "kill/a",
        grant_sent + ttl,
        grant_answered + latest_after,
    )
    .await;
    let last = cluster.wait_for_same_revision(&survivors, 1).await;
    cluster.assert_same_hash(&survivors, last).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_transfers_faster_than_the_ttl_do_not_keep_a_lease_alive() {
    let cluster = ProcessCluster::start(3, checkpointing_cluster_options()).await;
    let ttl_seconds = 4;
    let ttl = Duration::from_secs(ttl_seconds as u64);
    let leader = cluster.leader().await;
    let grant_sent = Instant::now();
    let lease = grant(&cluster.client(leader), ttl_seconds).await;
    let grant_answered = Instant::now();
    put_with_lease(&cluster.client(leader), "storm/a", lease).await;
    let (not_before, not_after) = (
        grant_sent + ttl,
        grant_answered + ttl + CHECKPOINT_INTERVAL + EXPIRY_SLACK,
    );

    // Move the leadership round the members, each move as soon as the new leader has taken the
    // lease over (it answers the lease's time-to-live), until the key is gone; every read of it is
    // checked against the bounds.
    let mut leader = leader;
    let mut transfers = 0;
    let mut moved_at = Vec::new();
    loop {
        let reader = cluster.client(leader);
        if observe_once(&reader, "storm/a", not_before, not_after).await {
            break;
        }
        let target = followers(&cluster, leader).await[transfers % 2];
        moved_at.push(transfer_leadership(&cluster, leader, target).await);
        leader = target;
        transfers += 1;
        wait_for_takeover(&cluster.client(leader), lease).await;
    }
    let longest_gap = moved_at
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or_default();
    eprintln!("{transfers} leader transfers, at most {longest_gap:?} apart");
    assert!(
        transfers >= 3 && longest_gap < ttl,
        "the leadership moved {transfers} times, at most {longest_gap:?} apart: not a storm \
         of transfers faster than the TTL"
    );
    let ids = cluster.ids();
    let last = cluster.wait_for_same_revision(&ids, 1).await;
    cluster.assert_same_hash(&ids, last).await;
}
