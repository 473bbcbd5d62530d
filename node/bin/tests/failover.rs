//! Failover in a real three-member cluster of `revkv serve` processes: after the leader is killed
//! with SIGKILL the survivors elect a new leader and keep taking writes, and the old leader,
//! restarted on its data directory, catches up to an equal replica hash; a member that was down
//! while the leader snapshotted and purged its log catches up by installing a snapshot; and writes
//! cut off by the crash answer 503 only when they did not happen (otherwise 504, outcome unknown);
//! and a write through a follower while no leader is elected waits for one within its own timeout.

use crate::process_cluster;

use std::collections::BTreeMap;

use process_cluster::{
    cluster_options, failed_vote_requests, wait_until, ProcessCluster, CONVERGENCE_TIMEOUT,
};
use reqwest::{Method, StatusCode};

/// What openraft 0.10.0-alpha.37's state machine worker logs (target
/// `openraft::core::sm::worker`, level info) once a snapshot received from the leader has been
/// installed. The version is pinned, so the texts here are stable.
const SNAPSHOT_INSTALLED_LOG_LINE: &str = "Done install complete snapshot";

/// What openraft's log handler logs (target `openraft::engine::handler::log_handler`, level info)
/// when it purges the log, followed by the last purged log id, such as `T1-N2.105`.
const PURGE_LOG_LINE: &str = "purge log, last_purged: ";
const PURGE_UPTO_FIELD: &str = "purge_upto: ";

/// `RUST_LOG` that makes members log their log purges and snapshot installations.
const LOG_PURGES_AND_SNAPSHOT_INSTALLS: &str = "info,openraft=warn,\
    openraft::engine::handler::log_handler=info,openraft::core::sm::worker=info";

/// The highest log index a member's log file says it purged its raft log through.
fn highest_purged_index(log: &str) -> Option<u64> {
    log.lines()
        .filter(|line| line.contains(PURGE_LOG_LINE))
        .filter_map(|line| {
            let upto = line.split(PURGE_UPTO_FIELD).nth(1)?;
            let log_id = upto.split_whitespace().next()?;
            log_id.rsplit('.').next()?.parse::<u64>().ok()
        })
        .max()
}

/// How many elections a lone follower must start and lose before the paused member comes back:
/// each takes at least the harness's election timeout (300 ms), so ten take at least 3 s, past
/// the 2.1 s after which a forwarded write used to give up with 503 (five attempts 300 ms apart,
/// then at most three longest election timeouts, 1.8 s, of waiting for a leader).
const ELECTIONS_WITHOUT_A_QUORUM: usize = 10;

/// A request timeout far longer than the elections above and the one that ends them.
const LONG_REQUEST_TIMEOUT_MS: u64 = 15_000;

/// Asserts that member `id` holds exactly `expected` under `prefix`, read from its local state.
async fn assert_member_holds(
    cluster: &ProcessCluster,
    id: u64,
    prefix: &str,
    expected: &BTreeMap<String, String>,
) {
    let answer = cluster
        .client(id)
        .get(&format!("/v1/kv?prefix={prefix}&consistency=serializable"))
        .await
        .expect_ok(format_args!("range {prefix} on member {id}"));
    assert_eq!(answer.json["more"], false, "one page holds the test's keys");
    let held: BTreeMap<String, String> = answer.json["kvs"]
        .as_array()
        .expect("kvs")
        .iter()
        .map(|kv| {
            let text = |name: &str| kv[name].as_str().expect("text").to_string();
            (text("key"), text("value"))
        })
        .collect();
    assert_eq!(held.len(), expected.len(), "member {id}: number of keys");
    assert!(held == *expected, "member {id} holds other data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_and_catches_up_after_restart() {
    let mut cluster = ProcessCluster::start(3, cluster_options()).await;
    let mut expected = BTreeMap::new();
    let mut last_revision = 0;
    for (index, id) in cluster.ids().into_iter().cycle().take(9).enumerate() {
        let key = format!("fail/before/{index}");
        let value = format!("written through {id} before the failover");
        last_revision = cluster.client(id).put_ok(&key, &value).await;
        expected.insert(key, value);
    }

    let old_leader = cluster.leader().await;
    cluster.kill(old_leader);
    let survivors = cluster.running_ids();
    let new_leader = cluster.wait_for_leader(&survivors).await;
    assert_ne!(new_leader, old_leader);

    for (index, id) in survivors.iter().cycle().take(20).enumerate() {
        let key = format!("fail/after/{index}");
        let value = format!("written through {id} while member {old_leader} was down");
        let revision = cluster
            .client(*id)
            .put_retrying(&key, &value, CONVERGENCE_TIMEOUT)
            .await;
        assert!(revision > last_revision, "revisions keep growing");
        last_revision = revision;
        expected.insert(key, value);
    }
    for id in &survivors {
        let read = cluster
            .client(*id)
            .get_key("fail/after/19", "")
            .await
            .expect_ok(format_args!("linearizable read on survivor {id}"));
        assert_eq!(read.json["kv"]["mod_revision"], last_revision);
    }

    cluster.restart(old_leader).await;
    let ids = cluster.ids();
    cluster.wait_for_leader(&ids).await;
    let revision = cluster.wait_for_same_revision(&ids, last_revision).await;
    cluster.assert_same_hash(&ids, revision).await;
    assert_member_holds(&cluster, old_leader, "fail/", &expected).await;
    // The restarted member also serves linearizable reads of the newest data.
    let read = cluster
        .client(old_leader)
        .get_key("fail/after/19", "")
        .await
        .expect_ok("linearizable read on the restarted member");
    assert_eq!(read.json["kv"]["mod_revision"], last_revision);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_missed_purged_log_entries_catches_up_by_snapshot() {
    const WRITES_WHILE_DOWN: usize = 400;
    let options = cluster_options()
        .with_flags(&["--snapshot-entries", "100", "--snapshot-keep-entries", "10"])
        .with_environment("RUST_LOG", LOG_PURGES_AND_SNAPSHOT_INSTALLS);
    let mut cluster = ProcessCluster::start(3, options).await;
    let mut expected = BTreeMap::new();
    for index in 0..10 {
        let key = format!("snap/early/{index:02}");
        let value = format!("early {index}");
        cluster.client(1).put_ok(&key, &value).await;
        expected.insert(key, value);
    }
    let leader = cluster.leader().await;
    let stopped = *cluster
        .ids()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    cluster.kill(stopped);
    let survivors = cluster.running_ids();
    // Nothing is in flight, so the leader's log ends at its commit index, and the stopped member's
    // log ends at or before it.
    let stopped_log_ends_by = cluster
        .client(leader)
        .status()
        .await
        .expect("the leader's status")["commit_index"]
        .as_u64()
        .expect("a commit index");
    // Far more entries than one snapshot interval plus the entries kept behind it.
    for index in 0..WRITES_WHILE_DOWN {
        let writer = survivors[index % survivors.len()];
        let key = format!("snap/late/{index:04}");
        let value = format!("late {index}");
        cluster.client(writer).put_ok(&key, &value).await;
        expected.insert(key, value);
    }
    // Overwrite and delete some keys too, so the snapshot must carry more than fresh creations.
    for index in 0..5 {
        let key = format!("snap/early/{index:02}");
        cluster.client(leader).put_ok(&key, "overwritten").await;
        expected.insert(key, "overwritten".into());
    }
    let deleted = cluster
        .client(leader)
        .delete("/v1/kv/snap/early/09")
        .await
        .expect_ok("delete a key while the member is down");
    let last_revision = deleted.revision();
    expected.remove("snap/early/09");

    // openraft postpones a leader's purge while a replication stream still reads the entries, so
    // wait until both survivors have purged past everything the stopped member has: whichever
    // leads then, it can only bring the stopped member up to date with a snapshot.
    let what =
        format!("members {survivors:?} to purge their raft logs past index {stopped_log_ends_by}");
    wait_until(what, CONVERGENCE_TIMEOUT, async || {
        survivors
            .iter()
            .all(|id| {
                highest_purged_index(&cluster.log_text(*id))
                    .is_some_and(|purged| purged > stopped_log_ends_by)
            })
            .then_some(())
    })
    .await;

    cluster.restart(stopped).await;
    let ids = cluster.ids();
    let revision = cluster.wait_for_same_revision(&ids, last_revision).await;
    assert_eq!(revision, last_revision);
    cluster.assert_same_hash(&ids, revision).await;
    assert_member_holds(&cluster, stopped, "snap/", &expected).await;

    let log = cluster.log_text(stopped);
    let since_restart = log
        .rsplit("==== revkv harness: starting member")
        .next()
        .expect("the harness marks every start");
    assert!(
        since_restart.contains(SNAPSHOT_INSTALLED_LOG_LINE),
        "member {stopped} caught up without installing a snapshot from the leader"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_cut_off_by_a_leader_crash_answer_unavailable_only_when_they_did_not_happen() {
    const WRITES_PER_FOLLOWER: usize = 200;
    // The crash lands at a random point of a write's life, so a few rounds make it likely that
    // one lands after a follower forwarded a write and before the leader's answer came back.
    for round in 0..3 {
        let mut cluster = ProcessCluster::start(3, cluster_options()).await;
        let leader = cluster.leader().await;
        let followers: Vec<_> = cluster
            .ids()
            .into_iter()
            .filter(|id| *id != leader)
            .map(|id| cluster.client(id))
            .collect();
        let writers: Vec<_> = followers
            .iter()
            .cloned()
            .map(|client| {
                tokio::spawn(async move {
                    let mut answers = Vec::new();
                    for index in 0..WRITES_PER_FOLLOWER {
                        let key = format!("cut/{}/{index:03}", client.id);
                        let body = serde_json::to_vec(&serde_json::json!({ "value": "v" }))
                            .expect("JSON encodes");
                        let answer = client
                            .try_send(Method::PUT, &format!("/v1/kv/{key}"), Some(body), &[])
                            .await
                            .unwrap_or_else(|error| panic!("{key}: no answer: {error}"));
                        answers.push((key, answer));
                    }
                    answers
                })
            })
            .collect();
        let probe = &followers[0];
        wait_until(
            "some writes before the crash",
            CONVERGENCE_TIMEOUT,
            async || {
                let revision = probe.status().await?["revision"].as_u64()?;
                (revision > 40).then_some(())
            },
        )
        .await;
        cluster.kill(leader);
        let mut answers = Vec::new();
        for writer in writers {
            answers.extend(writer.await.expect("a writer task"));
        }
        let survivors = cluster.running_ids();
        cluster.wait_for_leader(&survivors).await;
        let mut acknowledged_after_the_crash = false;
        let mut crash_seen = false;
        for (key, answer) in &answers {
            match answer.status {
                StatusCode::OK => acknowledged_after_the_crash |= crash_seen,
                StatusCode::SERVICE_UNAVAILABLE => {
                    crash_seen = true;
                    answer.expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", &[]);
                    assert!(answer.header("retry-after").is_some(), "{answer:?}");
                    // "Unavailable, retry" promises the write did not happen and never will.
                    let now = probe.get_key(key, "").await;
                    assert_eq!(
                        now.status,
                        StatusCode::NOT_FOUND,
                        "round {round}: {key} was answered 503 but was applied: {answer:?}"
                    );
                }
                // The outcome is unknown: the key may or may not be there.
                StatusCode::GATEWAY_TIMEOUT => {
                    crash_seen = true;
                    answer.expect_error(StatusCode::GATEWAY_TIMEOUT, "timeout", &[]);
                }
                _ => panic!("round {round}: {key}: unexpected answer {answer:?}"),
            }
        }
        assert!(
            !crash_seen || acknowledged_after_the_crash,
            "round {round}: writes continued after the crash"
        );
        let revision = cluster.wait_for_same_revision(&survivors, 0).await;
        cluster.assert_same_hash(&survivors, revision).await;
    }
}

/// A write through a follower while the cluster has no leader waits for one within the request's
/// own timeout (issue 33, item 8): the leader is killed and the other follower frozen, so the
/// follower the write went to loses election after election; once the frozen member runs again a
/// leader is elected and the write is applied. It used to answer 503 after a fixed number of
/// attempts, long before its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_a_follower_waits_for_a_new_leader_within_its_timeout() {
    let options = cluster_options().with_request_timeout_ms(LONG_REQUEST_TIMEOUT_MS);
    let mut cluster = ProcessCluster::start(3, options).await;
    let leader = cluster.leader().await;
    let followers: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let (writer_id, frozen_id) = (followers[0], followers[1]);
    let writer = cluster.client(writer_id);
    writer.put_ok("election/before", "1").await;

    cluster.pause(frozen_id);
    cluster.kill(leader);
    let failed_before = failed_vote_requests(&cluster, writer_id, leader);
    let write = {
        let writer = writer.clone();
        tokio::spawn(async move { writer.put("election/during", "2").await })
    };
    let what = format!("{ELECTIONS_WITHOUT_A_QUORUM} elections lost by member {writer_id}");
    wait_until(what, CONVERGENCE_TIMEOUT, async || {
        let failed = failed_vote_requests(&cluster, writer_id, leader);
        (failed >= failed_before + ELECTIONS_WITHOUT_A_QUORUM).then_some(())
    })
    .await;
    if write.is_finished() {
        let early = write.await.expect("the write task");
        panic!("the write answered before any leader was elected: {early:?}");
    }
    cluster.resume(frozen_id);

    let answer = write.await.expect("the write task");
    let written = answer
        .expect_ok("a write that waited for the election")
        .revision();
    let survivors = cluster.running_ids();
    let new_leader = cluster.wait_for_leader(&survivors).await;
    assert_ne!(new_leader, leader);
    let read = writer
        .get_key("election/during", "")
        .await
        .expect_ok("the write, read back");
    assert_eq!(read.json["kv"]["mod_revision"], written);
}
