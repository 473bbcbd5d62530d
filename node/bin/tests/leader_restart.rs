//! A leader that is SIGKILLed and restarted before its followers' election timeout must not take
//! up its old term again: it replicated entries before its own fsync finished (the log writer
//! overlaps the leader's fsync with the followers'), so after the crash its log may end below
//! entries its followers hold durably. Resuming the same term, it would write *different* entries
//! at those log ids, and followers, which compare log ids and not contents, would keep theirs:
//! the replicas' revisions part for good. This is what a 45-second CI chaos run found on
//! 2026-11-23 (docs/RELIABILITY.md, "A restarted leader rewrote entries of its own term").
//!
//! The test keeps writes flowing through every member while it kills and at once restarts the
//! leader several times, with an election timeout long enough for the restarted process to come
//! back first, and then checks that every member applied the same revision and hash at the same
//! log index.

use crate::process_cluster;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use process_cluster::{cluster_options, wait_until, MemberClient, ProcessCluster};

/// Kill-and-restart rounds. Each kill lands while writes are in flight, so a leader with entries
/// sent but not yet durable is the common case, not the rare one.
const ROUNDS: usize = 10;

/// Writes that must succeed between two kills, so each round has fresh entries in flight.
const WRITES_PER_ROUND: u64 = 40;

/// Concurrent writers; each sends through one member, so most writes are forwarded.
const WRITERS: u64 = 16;

/// Long enough that a restarted member is back well before a follower would start an election:
/// that is when a restored leadership in the old term was possible.
const ELECTION_TIMEOUT_MS: &str = "1000";

/// Waiting for a round's writes, or for the members to agree after the last round.
const ROUND_TIMEOUT: Duration = Duration::from_secs(60);

/// Writes unique values through one member until told to stop, counting the acknowledged ones.
/// Failures are expected (the leader is being killed) and ignored: the check is on the replicas.
async fn write_until_stopped(
    client: MemberClient,
    writer: u64,
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
) {
    let mut sequence = 0u64;
    while !stop.load(Ordering::Relaxed) {
        sequence += 1;
        let key = format!("restart/{writer}/{}", sequence % 16);
        let value = format!("writer {writer} write {sequence}");
        let body = serde_json::to_vec(&json!({ "value": value })).expect("JSON encodes");
        // The member this writer uses may be the one just killed: no answer is expected then.
        let answer = client
            .try_send(Method::PUT, &format!("/v1/kv/{key}"), Some(body), &[])
            .await;
        if answer.is_ok_and(|answer| answer.status.is_success()) {
            acknowledged.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Every member's (applied log index, revision), once all answer.
async fn positions(cluster: &ProcessCluster) -> Option<Vec<(u64, u64, u64)>> {
    let mut positions = Vec::new();
    for id in cluster.ids() {
        let status = cluster.client(id).status().await?;
        positions.push((
            id,
            status["applied_index"].as_u64()?,
            status["revision"].as_u64()?,
        ));
    }
    Some(positions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_restarted_within_its_election_timeout_never_rewrites_replicated_entries() {
    let options = cluster_options().with_flags(&["--election-timeout-ms", ELECTION_TIMEOUT_MS]);
    let mut cluster = ProcessCluster::start(3, options).await;
    cluster.leader().await;
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let ids = cluster.ids();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let client = cluster.client(ids[writer as usize % ids.len()]);
            tokio::spawn(write_until_stopped(
                client,
                writer,
                stop.clone(),
                acknowledged.clone(),
            ))
        })
        .collect();

    for round in 0..ROUNDS {
        let target = acknowledged.load(Ordering::Relaxed) + WRITES_PER_ROUND;
        wait_until(
            format!("round {round}: {WRITES_PER_ROUND} more acknowledged writes"),
            ROUND_TIMEOUT,
            async || (acknowledged.load(Ordering::Relaxed) >= target).then_some(()),
        )
        .await;
        let leader = cluster.leader().await;
        cluster.kill(leader);
        cluster.restart(leader).await;
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.expect("a writer task");
    }

    // Once writes stop, every member reaches the same applied log index; at that index the
    // replicas must agree on the revision and on the hash of everything stored.
    let agreed = wait_until(
        "every member to apply the same log index",
        ROUND_TIMEOUT,
        async || {
            let positions = positions(&cluster).await?;
            let index = positions[0].1;
            positions
                .iter()
                .all(|(_, other, _)| *other == index)
                .then_some(positions)
        },
    )
    .await;
    let revision = agreed[0].2;
    assert!(
        agreed.iter().all(|(_, _, other)| *other == revision),
        "members applied the same log index but reached different revisions: \
         (member, applied index, revision) = {agreed:?}"
    );
    cluster.assert_same_hash(&ids, revision).await;
}
