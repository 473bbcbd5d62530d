//! The watchers of a run: each watches the workload's prefix through a member the seed picks,
//! with progress bookmarks, and when its watch ends (the member stopped, or the watcher dropped
//! it after a drawn time and paused, as a client that lost its connection does) resumes on another
//! member from the revision after the last it was promised, as a Kubernetes reflector does. When
//! that revision is compacted, it lists the prefix again and watches from the list's revision,
//! as a reflector does after "too old resource version". Each watch's messages are recorded for
//! the watch check.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use revkv_node::watch::CancelReason;
use revkv_node::watch::{EventFilter, Watch, WatchMessage, WatchRequest};
use revkv_node::{KvBackend, NodeError, ReadConsistency};
use revkv_storage::{EventKind, KeyRange, RangeRequest};
use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::history::{WatchReceived, WatchRecord};
use crate::trace::Trace;
use crate::workload::KEY_PREFIX;

/// How long a watcher waits before trying again when no member would take its watch.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How long a watcher keeps one watch before it drops it, and the longest it then pauses, in
/// milliseconds: long enough that a compaction may pass the revision it resumes from.
const WATCH_LIFETIME_MILLIS: std::ops::RangeInclusive<u64> = 200..=8_000;
const MAX_PAUSE_MILLIS: u64 = 3_000;

/// The most watches one watcher opens in a run: a bound, so a member that refuses every watch
/// cannot make a watcher spin forever.
const MAX_WATCHES_PER_WATCHER: usize = 10_000;

/// Watches until `stop` turns true, appending each watch's record to `records`.
pub async fn run_watcher(
    id: u64,
    seed: u64,
    cluster: Arc<Cluster>,
    trace: Trace,
    mut stop: watch::Receiver<bool>,
    records: Arc<Mutex<Vec<WatchRecord>>>,
) {
    let mut random = StdRng::seed_from_u64(seed ^ 0x5EED_0000 ^ id);
    let mut start_revision = 1;
    for _ in 0..MAX_WATCHES_PER_WATCHER {
        if *stop.borrow() {
            return;
        }
        let members = cluster.running_ids();
        let chosen = (!members.is_empty()).then(|| members[random.random_range(0..members.len())]);
        let opened = chosen.and_then(|member| Some((member, cluster.backend(member)?)));
        let Some((member, backend)) = opened else {
            tokio::time::sleep(RETRY_PAUSE).await;
            continue;
        };
        let interval = Duration::from_millis(random.random_range(100..=1_000));
        let request = WatchRequest {
            filter: EventFilter::of(KeyRange::prefix(KEY_PREFIX)),
            start_revision: Some(start_revision),
            prev_kv: false,
            progress_interval: Some(interval),
        };
        let opened = cluster
            .on_member(member, async { backend.watch_hub().open(request) })
            .await;
        // The watch ends when its member stops; holding the member's operations past that
        // would keep its files open after it stopped.
        drop(backend);
        let watch = match opened {
            Ok(watch) => watch,
            Err(NodeError::Storage(revkv_storage::Error::Compacted { .. })) => {
                trace.record(
                    Some(member),
                    None,
                    format!("watcher {id}: {start_revision} is compacted"),
                );
                start_revision = list_again(id, &cluster, &mut random, &trace)
                    .await
                    .unwrap_or(start_revision);
                continue;
            }
            Err(error) => {
                trace.record(Some(member), None, format!("watcher {id} refused: {error}"));
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        trace.record(
            Some(member),
            None,
            format!("watcher {id} watches from {start_revision}"),
        );
        let mut record = WatchRecord {
            member,
            prefix: KEY_PREFIX.to_owned(),
            start_revision,
            messages: Vec::new(),
        };
        let lifetime = Duration::from_millis(random.random_range(WATCH_LIFETIME_MILLIS));
        // The watch's bookmark timer is the member's: it ticks on the member's clock.
        let following = follow(id, watch, &mut record, &trace, &mut stop, lifetime);
        let ended = cluster.on_member(member, following).await;
        start_revision = resume_revision(&record).max(start_revision);
        match ended {
            WatchEnded::Compacted => {
                if let Some(listed) = list_again(id, &cluster, &mut random, &trace).await {
                    start_revision = listed;
                }
            }
            WatchEnded::Dropped => {
                let pause = random.random_range(0..=MAX_PAUSE_MILLIS);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            WatchEnded::Other => {}
        }
        records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(record);
    }
}

/// How one watch ended.
enum WatchEnded {
    /// The member canceled it because the history it needs is compacted.
    Compacted,
    /// The watcher dropped it when its lifetime was up.
    Dropped,
    /// The member ended it otherwise (it stopped), or the run is over.
    Other,
}

/// Records what `watch` sends until it ends, `lifetime` is up or `stop` turns true.
async fn follow(
    id: u64,
    mut watch: Watch,
    record: &mut WatchRecord,
    trace: &Trace,
    stop: &mut watch::Receiver<bool>,
    lifetime: Duration,
) -> WatchEnded {
    let member = Some(record.member);
    let dropped_at = tokio::time::Instant::now() + lifetime;
    loop {
        let message = tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => return WatchEnded::Other,
            _ = tokio::time::sleep_until(dropped_at) => {
                trace.record(member, None, format!("watcher {id} drops its watch"));
                return WatchEnded::Dropped;
            }
            message = watch.next() => message,
        };
        match message {
            Some(WatchMessage::Events(events)) => {
                for event in events.events() {
                    let key = String::from_utf8_lossy(&event.kv.key).into_owned();
                    let value = (event.kind == EventKind::Put)
                        .then(|| String::from_utf8_lossy(&event.kv.value).into_owned());
                    let text = format!("watcher {id} event {} {key} {value:?}", events.revision);
                    trace.record(member, Some(&key), text);
                    record.messages.push(WatchReceived::Event {
                        revision: events.revision,
                        key,
                        value,
                    });
                }
            }
            Some(WatchMessage::Bookmark { revision }) => {
                trace.record(member, None, format!("watcher {id} bookmark {revision}"));
                record.messages.push(WatchReceived::Bookmark { revision });
            }
            Some(WatchMessage::Created { .. }) => {}
            Some(WatchMessage::Canceled(why)) => {
                trace.record(member, None, format!("watcher {id} canceled: {why:?}"));
                if why.reason == CancelReason::Compacted {
                    return WatchEnded::Compacted;
                }
                return WatchEnded::Other;
            }
            None => return WatchEnded::Other,
        }
    }
}

/// Lists the prefix again, linearizably, through a member the seed picks, and answers the
/// revision after the list's: where the next watch starts. `None` when no member answered.
async fn list_again(id: u64, cluster: &Cluster, random: &mut StdRng, trace: &Trace) -> Option<u64> {
    let members = cluster.running_ids();
    if members.is_empty() {
        return None;
    }
    let member = members[random.random_range(0..members.len())];
    let backend = cluster.backend(member)?;
    let list = RangeRequest::of(KeyRange::prefix(KEY_PREFIX));
    let read = cluster.on_member(member, backend.read(list, ReadConsistency::Linearizable));
    let answer = tokio::time::timeout(LIST_DEADLINE, read).await.ok()?.ok()?;
    let revision = answer.header.revision;
    trace.record(
        Some(member),
        None,
        format!("watcher {id} listed at {revision}"),
    );
    Some(revision + 1)
}

/// How long a watcher waits for its list.
const LIST_DEADLINE: Duration = Duration::from_secs(5);

/// Where a new watch picks up: after the last event or bookmark this one delivered.
fn resume_revision(record: &WatchRecord) -> u64 {
    let last = record.messages.iter().map(|message| match message {
        WatchReceived::Event { revision, .. } | WatchReceived::Bookmark { revision } => *revision,
    });
    last.max()
        .map_or(record.start_revision, |revision| revision + 1)
}
