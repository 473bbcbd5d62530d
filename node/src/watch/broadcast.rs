//! The hub's broadcast loop: follows the applied revision, reads each new slice of history that a
//! synced watcher needs once (and skips, without reading, what none needs),
//! and hands it to the registry, which offers every revision's events to the synced watchers and
//! then the bookmarks that became due. What happens when the hub's next revision was compacted
//! away, or the store cannot be read, is decided here and carried out by the registry.

use std::sync::Arc;
use std::time::Duration;

use revkv_storage::{Error as StorageError, MvccStore};
use tokio::sync::watch;

use super::feed::RevisionFeed;
use super::registry::Registry;

/// How long the hub waits before reading the store again after a failed read.
const READ_RETRY_DELAY: Duration = Duration::from_millis(100);

/// What the loop reads from and hands to.
pub(super) struct BroadcastLoop {
    pub registry: Arc<Registry>,
    pub store: Arc<MvccStore>,
    pub read_batch_events: usize,
    /// Becomes true when the hub shuts down.
    pub stop: watch::Receiver<bool>,
}

impl BroadcastLoop {
    /// Follows the applied revision until the hub stops or the feed ends.
    pub async fn run(mut self, mut feed: impl RevisionFeed) {
        let mut applied = feed.current();
        loop {
            while self.registry.fast_forward(applied) < applied && !*self.stop.borrow() {
                if !self.broadcast_round().await {
                    // The store could not be read; try again a little later rather than spin.
                    tokio::time::sleep(READ_RETRY_DELAY).await;
                }
            }
            tokio::select! {
                changed = feed.changed() => match changed {
                    Some(revision) => applied = revision,
                    None => break,
                },
                _ = self.stop.wait_for(|stopped| *stopped) => break,
            }
        }
        tracing::debug!("watch hub stopped");
    }

    /// Reads the next slice of history after the broadcast point and offers it to synced watchers.
    /// False when the store could not be read.
    async fn broadcast_round(&self) -> bool {
        let (from, with_prev_kv) = self.registry.next_broadcast();
        let store = self.store.clone();
        let max_events = self.read_batch_events;
        let read =
            tokio::task::spawn_blocking(move || store.events_since(from, max_events, with_prev_kv))
                .await;
        let batch = match read {
            Ok(Ok(batch)) => batch,
            Ok(Err(StorageError::Compacted {
                compact_revision, ..
            })) => {
                self.registry.fall_behind_compaction(compact_revision);
                return true;
            }
            Ok(Err(error)) => return self.fail_synced_watchers(&error.to_string()),
            Err(join_error) => return self.fail_synced_watchers(&join_error.to_string()),
        };
        self.registry.offer_batch(from, with_prev_kv, batch);
        true
    }

    /// The store could not be read: synced watchers are canceled so that they resume elsewhere
    /// rather than wait on a member that cannot serve them. Answers false (the round failed).
    fn fail_synced_watchers(&self, error: &str) -> bool {
        tracing::error!(error, "watch hub could not read the history");
        self.registry.fail_synced_watchers();
        false
    }
}
