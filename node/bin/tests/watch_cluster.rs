//! Watches on a real three-member cluster of `revkv serve` processes, under concurrent writers
//! (puts, deletes, multi-key txns): many watchers on different members and key sets, some that
//! disconnect and resume on another member, some on a member that is then stopped. Every stream
//! is checked against the store's history for the six etcd properties, prev_kv and filters (the
//! checker is `revkv_tools::chaos::check::watch`, whose own tests plant faults). Also: automatic
//! compaction keeps its window on every member, and reads and watches below it answer 410.

use crate::process_cluster;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use process_cluster::{
    cluster_options, wait_until, MemberClient, ProcessCluster, CONVERGENCE_TIMEOUT,
};
use reqwest::Method;
use revkv_tools::chaos::check::states::{History, Kv, State};
use revkv_tools::chaos::check::watch::{check_watch, Message, Segment, WatchSpec};
use serde_json::{json, Value};
use tokio::sync::watch;

/// Longest wait for the next chunk of a stream whose member is alive; bookmarks every
/// `PROGRESS_MS` keep a healthy stream far busier than this.
const CHUNK_DEADLINE: Duration = Duration::from_secs(10);
const PROGRESS_MS: u64 = 100;
const WRITES_PER_WRITER: usize = 120;

/// One watcher's plan.
struct WatcherPlan {
    spec: WatchSpec,
    /// Members to use, first one first; the next one after a disconnect or a lost member.
    members: Vec<u64>,
    /// Drop the connection after this many EVENTS messages, then resume elsewhere.
    disconnect_every: Option<usize>,
}

/// What a watcher saw.
struct WatcherRecord {
    segments: Vec<Segment>,
    /// Reasons of the CANCELED messages it received.
    cancel_reasons: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stream_satisfies_the_six_properties_under_writes_disconnects_and_a_stopped_member() {
    let mut cluster = ProcessCluster::start(3, cluster_options()).await;
    cluster.wait_for_leader(&[1, 2, 3]).await;
    let start = cluster.client(1).put_ok("w/setup", "ready").await;
    cluster.wait_for_same_revision(&[1, 2, 3], start).await;

    let (final_sender, final_revision) = watch::channel(None::<u64>);
    let plans = watcher_plans();
    let specs: Vec<WatchSpec> = plans.iter().map(|plan| plan.spec.clone()).collect();
    let mut watchers = Vec::new();
    for plan in plans {
        let clients: Vec<MemberClient> =
            plan.members.iter().map(|id| cluster.client(*id)).collect();
        watchers.push(tokio::spawn(run_watcher(
            plan,
            clients,
            start + 1,
            final_revision.clone(),
        )));
    }

    let writes_done = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = [1u64, 2]
        .into_iter()
        .map(|id| tokio::spawn(run_writer(cluster.client(id), id, writes_done.clone())))
        .collect();
    // Stop member 3 halfway through the writes; its watchers must be told and resume elsewhere.
    let done = writes_done.clone();
    wait_until("half the writes", CONVERGENCE_TIMEOUT, async || {
        (done.load(Ordering::SeqCst) >= WRITES_PER_WRITER).then_some(())
    })
    .await;
    cluster.stop(3);
    for writer in writers {
        writer.await.unwrap();
    }
    let last = cluster.wait_for_same_revision(&[1, 2], start + 1).await;
    final_sender.send_replace(Some(last));

    let history = read_history(&cluster.client(1), start, last).await;
    eprintln!("history: revisions {start}..={last}");
    let mut stopped_member_cancels = 0;
    for (index, watcher) in watchers.into_iter().enumerate() {
        let record = watcher.await.unwrap();
        if let Err(error) = check_watch(&history, &specs[index], &record.segments, last) {
            panic!("watcher {index} ({:?}): {error}", specs[index]);
        }
        let events: usize = record
            .segments
            .iter()
            .flat_map(|segment| &segment.messages)
            .filter(|message| matches!(message, Message::Events { .. }))
            .count();
        eprintln!(
            "watcher {index}: {} segments, {events} event messages, cancels {:?}",
            record.segments.len(),
            record.cancel_reasons
        );
        stopped_member_cancels += record
            .cancel_reasons
            .iter()
            .filter(|reason| *reason == "member_stopping")
            .count();
    }
    assert!(
        stopped_member_cancels > 0,
        "watchers on the stopped member were told with CANCELED member_stopping"
    );
    // Every stream has closed: the members' watcher gauges go back to zero (nothing leaked), and
    // the events they sent were counted.
    for id in [1u64, 2] {
        let client = cluster.client(id);
        let sent = wait_until(
            format!("member {id} to count no open watchers"),
            CONVERGENCE_TIMEOUT,
            async || {
                let text = client.metrics_text().await;
                (metric_value(&text, "revkv_watch_watchers") == Some(0.0))
                    .then(|| metric_value(&text, "revkv_watch_events_sent_total"))
            },
        )
        .await;
        assert!(
            sent.unwrap_or(0.0) > 0.0,
            "member {id} counted the events it sent"
        );
    }
}

/// The value of an unlabelled sample in Prometheus text.
fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

fn watcher_plans() -> Vec<WatcherPlan> {
    let plan = |spec: WatchSpec, members: &[u64], disconnect_every: Option<usize>| WatcherPlan {
        spec,
        members: members.to_vec(),
        disconnect_every,
    };
    let with_prev = |spec: WatchSpec| WatchSpec {
        prev_kv: true,
        ..spec
    };
    let range_b = WatchSpec {
        range_end: Some("w/c/".into()),
        prefix: false,
        ..WatchSpec::prefix("w/b/")
    };
    let no_put = WatchSpec {
        no_put: true,
        ..WatchSpec::prefix("w/")
    };
    let no_delete = WatchSpec {
        no_delete: true,
        ..WatchSpec::prefix("w/c/")
    };
    vec![
        plan(WatchSpec::prefix("w/"), &[1, 2], None),
        plan(with_prev(WatchSpec::prefix("w/")), &[2, 1], None),
        plan(WatchSpec::prefix("w/"), &[3, 1, 2], None),
        plan(with_prev(WatchSpec::prefix("w/a/")), &[3, 2, 1], None),
        plan(WatchSpec::prefix("w/a/"), &[1, 2], Some(15)),
        plan(range_b, &[2, 3, 1], None),
        plan(WatchSpec::single("w/a/0"), &[3, 1, 2], None),
        plan(no_put, &[1, 3, 2], None),
        plan(no_delete, &[2, 1], None),
        plan(with_prev(WatchSpec::prefix("w/")), &[2, 3, 1], Some(25)),
        plan(WatchSpec::prefix("w/b/"), &[3, 1, 2], Some(10)),
    ]
}

/// Writes a mix of puts, deletes and three-key txns through one member, retrying while the
/// cluster has no leader (the stopped member may have led it).
async fn run_writer(client: MemberClient, writer: u64, done: Arc<AtomicUsize>) {
    for step in 0..WRITES_PER_WRITER {
        let slot = (step + writer as usize) % 6;
        let (method, path, body) = match step % 4 {
            0 | 1 => (
                Method::PUT,
                format!("/v1/kv/w/{}/{slot}", ["a", "b", "c"][step % 3]),
                Some(json!({"value": format!("{writer}-{step}")})),
            ),
            2 => (
                Method::DELETE,
                format!("/v1/kv/w/{}/{slot}", ["a", "b", "c"][(step + 1) % 3]),
                None,
            ),
            _ => (
                Method::POST,
                "/v1/txn".to_string(),
                Some(json!({"compare": [], "success": [
                    {"put": {"key": format!("w/a/{slot}"), "value": format!("txn {writer}-{step}")}},
                    {"put": {"key": format!("w/b/{slot}"), "value": format!("txn {writer}-{step}")}},
                    {"delete": {"key": format!("w/c/{slot}")}}
                ], "failure": []})),
            ),
        };
        let body = body.map(|json| serde_json::to_vec(&json).unwrap());
        // 503 (no leader) and 504 (outcome unknown) are retried; the history, not the writer, is
        // the checker's reference, so a write applied twice is still checked correctly.
        let deadline = tokio::time::Instant::now() + CONVERGENCE_TIMEOUT;
        loop {
            let answer = client
                .try_send(method.clone(), &path, body.clone(), &[])
                .await;
            if answer.is_ok_and(|answer| answer.status.is_success()) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "write {step} of writer {writer} never succeeded"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        done.fetch_add(1, Ordering::SeqCst);
    }
}

/// Follows one watch until it has covered the final revision, resuming after every CANCELED,
/// disconnect or lost member on the next member of its plan.
async fn run_watcher(
    plan: WatcherPlan,
    clients: Vec<MemberClient>,
    start: u64,
    final_revision: watch::Receiver<Option<u64>>,
) -> WatcherRecord {
    let mut record = WatcherRecord {
        segments: Vec::new(),
        cancel_reasons: Vec::new(),
    };
    let mut next = start;
    let mut member = 0;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if final_revision.borrow().is_some_and(|last| next > last) {
            return record;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "watcher {:?} never finished",
            plan.spec
        );
        let client = &clients[member % clients.len()];
        let url = format!(
            "{}{}",
            client.base_url,
            plan.spec.path_and_query(next, PROGRESS_MS)
        );
        let Ok(response) = http.get(url).send().await else {
            member += 1; // The member is gone: resume on the next one.
            continue;
        };
        if !response.status().is_success() {
            member += 1;
            continue;
        }
        let mut segment = Segment {
            start: next,
            messages: Vec::new(),
        };
        let ended = read_segment(response, &mut segment, &plan, &final_revision).await;
        if let Some(Message::Canceled { reason, .. }) = segment.messages.last() {
            record.cancel_reasons.push(reason.clone());
        }
        next = segment.covered_through() + 1;
        record.segments.push(segment);
        if ended != SegmentEnd::Finished {
            member += 1;
        }
    }
}

#[derive(PartialEq, Eq)]
enum SegmentEnd {
    Finished,
    Interrupted,
}

/// Reads one connection's messages until CANCELED, a planned disconnect, a broken connection,
/// or coverage of the final revision.
async fn read_segment(
    mut response: reqwest::Response,
    segment: &mut Segment,
    plan: &WatcherPlan,
    final_revision: &watch::Receiver<Option<u64>>,
) -> SegmentEnd {
    let mut buffered = Vec::new();
    let mut events = 0;
    loop {
        while let Some(end) = buffered.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = buffered.drain(..=end).collect();
            let message = Message::from_json(&serde_json::from_slice::<Value>(&line).unwrap())
                .expect("a message in the contract's shape");
            let canceled = matches!(message, Message::Canceled { .. });
            events += usize::from(matches!(message, Message::Events { .. }));
            segment.messages.push(message);
            if canceled {
                return SegmentEnd::Interrupted;
            }
            if plan.disconnect_every.is_some_and(|every| events >= every) {
                return SegmentEnd::Interrupted;
            }
        }
        if final_revision
            .borrow()
            .is_some_and(|last| segment.covered_through() >= last)
        {
            return SegmentEnd::Finished;
        }
        match tokio::time::timeout(CHUNK_DEADLINE, response.chunk()).await {
            Ok(Ok(Some(chunk))) => buffered.extend_from_slice(&chunk),
            _ => return SegmentEnd::Interrupted,
        }
    }
}

/// The state of every key under `w/` at each revision `start..=last`, from historical reads.
async fn read_history(client: &MemberClient, start: u64, last: u64) -> History {
    let mut states = Vec::new();
    for revision in start..=last {
        let answer = client
            .get(&format!(
                "/v1/kv?prefix=w/&revision={revision}&consistency=serializable"
            ))
            .await
            .expect_ok(format_args!("history at {revision}"));
        let mut state = State::new();
        for kv in answer.json["kvs"].as_array().unwrap() {
            state.insert(kv["key"].as_str().unwrap().to_string(), Kv::from_json(kv));
        }
        states.push(state);
    }
    History::from_states(start, states)
}

/// Revision-count auto-compaction keeps the last N revisions on every member (the leader compacts
/// through raft), and reads and watches below the compact revision answer 410.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_compaction_keeps_the_configured_window_on_every_member() {
    let options = cluster_options().with_flags(&[
        "--auto-compaction-mode",
        "revision",
        "--auto-compaction-retention",
        "10",
        "--auto-compaction-interval-ms",
        "50",
    ]);
    let cluster = ProcessCluster::start(3, options).await;
    cluster.wait_for_leader(&[1, 2, 3]).await;
    let client = cluster.client(1);
    let mut last = 0;
    for index in 0..40 {
        last = client.put_ok(&format!("auto/{}", index % 5), "v").await;
    }
    let expected_compact = last - 10;
    for id in cluster.ids() {
        let member = cluster.client(id);
        wait_until(
            format!("member {id} compacted to {expected_compact}"),
            CONVERGENCE_TIMEOUT,
            async || {
                let status = member.status().await?;
                (status["compact_revision"] == expected_compact).then_some(())
            },
        )
        .await;
    }
    let below = client
        .get(&format!("/v1/kv/auto/0?revision={}", expected_compact - 1))
        .await;
    below.expect_error(
        reqwest::StatusCode::GONE,
        "compacted",
        &["compact_revision"],
    );
    assert_eq!(below.json["compact_revision"], expected_compact);
    let watch_below = client
        .get(&format!(
            "/v1/watch?key=auto/&prefix=true&start_revision={}",
            expected_compact - 1
        ))
        .await;
    watch_below.expect_error(
        reqwest::StatusCode::GONE,
        "compacted",
        &["compact_revision"],
    );
    let kept = client
        .get(&format!(
            "/v1/kv?prefix=auto/&revision={}",
            expected_compact
        ))
        .await;
    assert_eq!(
        kept.status,
        reqwest::StatusCode::OK,
        "the window's first revision is kept"
    );
}
