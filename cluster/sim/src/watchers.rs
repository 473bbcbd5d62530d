//! The watchers of a run: each watches the workload's prefix through a member the seed picks,
//! with progress bookmarks, and when its watch ends (the member stopped) resumes on another
//! member from the revision after the last it was promised, as a Kubernetes reflector does.
//! Each watch's messages are recorded for the watch check.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use revkv_node::watch::{EventFilter, Watch, WatchMessage, WatchRequest};
use revkv_node::KvBackend;
use revkv_storage::{EventKind, KeyRange};
use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::history::{WatchReceived, WatchRecord};
use crate::trace::Trace;
use crate::workload::KEY_PREFIX;

/// How long a watcher waits before trying again when no member would take its watch.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

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
        let opened = backend.watch_hub().open(request);
        // The watch ends when its member stops; holding the member's operations past that
        // would keep its files open after it stopped.
        drop(backend);
        let watch = match opened {
            Ok(watch) => watch,
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
        follow(id, watch, &mut record, &trace, &mut stop).await;
        start_revision = resume_revision(&record).max(start_revision);
        records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(record);
    }
}

/// Records what `watch` sends until it ends or `stop` turns true.
async fn follow(
    id: u64,
    mut watch: Watch,
    record: &mut WatchRecord,
    trace: &Trace,
    stop: &mut watch::Receiver<bool>,
) {
    let member = Some(record.member);
    loop {
        let message = tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => return,
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
                return;
            }
            None => return,
        }
    }
}

/// Where a new watch picks up: after the last event or bookmark this one delivered.
fn resume_revision(record: &WatchRecord) -> u64 {
    let last = record.messages.iter().map(|message| match message {
        WatchReceived::Event { revision, .. } | WatchReceived::Bookmark { revision } => *revision,
    });
    last.max()
        .map_or(record.start_revision, |revision| revision + 1)
}
