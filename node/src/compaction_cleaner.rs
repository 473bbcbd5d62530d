//! The background half of compaction (issue 14): applying `Request::Compact` moves the compact
//! revision at once and cleans at most a small part of the window inside the apply; this task
//! cleans the rest in bounded steps (`MvccStore::compact_step`), each its own short write
//! transaction, pausing between steps so applies go on, as etcd's scheduled compaction does with
//! `--experimental-compaction-batch-limit` and `--experimental-compaction-sleep-interval`. Every
//! member cleans its own file; nothing here is replicated, and reads never depend on how far it
//! got.

use std::sync::Arc;
use std::time::Duration;

use revkv_storage::MvccStore;
use tokio::sync::watch;

/// How the cleaner works through a pending window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanerSettings {
    /// History entries one step cleans (`revkv serve --compaction-batch-limit`).
    pub batch_entries: usize,
    /// The pause between two steps of one window (`--compaction-sleep-interval-ms`).
    pub pause_between_steps: Duration,
    /// How often an idle cleaner looks for a pending window (an atomic load, no transaction).
    pub idle_poll: Duration,
}

impl Default for CleanerSettings {
    fn default() -> Self {
        CleanerSettings {
            batch_entries: 1_000,
            pause_between_steps: Duration::from_millis(10),
            idle_poll: Duration::from_millis(100),
        }
    }
}

/// After a failed step (a disk fault, reported by the store), wait this long before the next.
const PAUSE_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Starts the cleaner; it stops when `stop` turns true.
pub fn spawn(store: Arc<MvccStore>, settings: CleanerSettings, stop: watch::Receiver<bool>) {
    tokio::spawn(run(store, settings, stop));
}

async fn run(store: Arc<MvccStore>, settings: CleanerSettings, mut stop: watch::Receiver<bool>) {
    loop {
        let pause = if store.compaction_pending() {
            step(&store, settings).await
        } else {
            settings.idle_poll
        };
        tokio::select! {
            _ = revkv_raft::clock::sleep(pause) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

/// One step off the async threads; answers how long to pause before the next.
async fn step(store: &Arc<MvccStore>, settings: CleanerSettings) -> Duration {
    let store = Arc::clone(store);
    let batch_entries = settings.batch_entries;
    let outcome = revkv_raft::runtime::offload(move || store.compact_step(batch_entries)).await;
    match outcome {
        Ok(Ok(_)) => settings.pause_between_steps,
        Ok(Err(error)) => {
            tracing::warn!(%error, "a background compaction step failed; trying again later");
            PAUSE_AFTER_FAILURE
        }
        Err(error) => {
            tracing::error!(%error, "a background compaction step panicked");
            PAUSE_AFTER_FAILURE
        }
    }
}
