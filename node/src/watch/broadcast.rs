//! The hub's broadcast loop: follows the applied revision, reads each new slice of history that a
//! synced watcher needs once (and skips, without reading, what none needs),
//! and hands it to the registry, which offers every revision's events to the synced watchers and
//! then the bookmarks that became due. What happens when the hub's next revision was compacted
//! away, or the store cannot be read, is decided here and carried out by the registry.

use std::sync::Arc;
use std::time::Duration;

use revkv_storage::{EventBatch, MvccStore, ReadError, StorageFailure};
use tokio::sync::watch;

use super::feed::RevisionFeed;
use super::registry::Registry;

/// How long the hub waits before reading the store again after a failed read.
const READ_RETRY_DELAY: Duration = Duration::from_millis(100);

/// The most history entries a round reads on the hub's own task. The revisions just applied are
/// usually a handful of entries, microseconds of reading, less than the hand-off to the blocking
/// pool and back costs (and that hand-off is most of a watch event's latency on a busy member);
/// a longer slice, or one revision of many events, still goes to the pool.
const INLINE_READ_ENTRIES: usize = 32;

/// Which read of the store a round makes: see `MvccStore::events_from_start`.
#[derive(Clone, Copy)]
enum Strictness {
    Strict,
    MayStartAtCompactRevision,
}

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
                    revkv_raft::clock::sleep(READ_RETRY_DELAY).await;
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
        match self.read(from, with_prev_kv, Strictness::Strict).await {
            Ok(batch) => self.registry.offer_batch(from, with_prev_kv, batch),
            Err(ReadError::Compacted {
                compact_revision, ..
            }) => {
                if self.registry.fall_behind_compaction(compact_revision) {
                    return self.serve_compact_revision().await;
                }
            }
            Err(error) => return self.fail_synced_watchers(&error.to_string()),
        }
        true
    }

    /// Offers the compact revision's remaining puts (and what follows) to the watchers that
    /// asked to start there; the registry left the broadcast point just below it.
    async fn serve_compact_revision(&self) -> bool {
        let (from, with_prev_kv) = self.registry.next_broadcast();
        match self
            .read(from, with_prev_kv, Strictness::MayStartAtCompactRevision)
            .await
        {
            Ok(batch) => self.registry.offer_batch(from, with_prev_kv, batch),
            // Compacted further meanwhile: the next round handles it as any other.
            Err(ReadError::Compacted { .. }) => {}
            Err(error) => return self.fail_synced_watchers(&error.to_string()),
        }
        true
    }

    async fn read(
        &self,
        from: u64,
        with_prev_kv: bool,
        strictness: Strictness,
    ) -> Result<EventBatch, ReadError> {
        let max_events = self.read_batch_events;
        if let Strictness::Strict = strictness {
            let few = self.store.events_since_if_at_most(
                from,
                max_events,
                with_prev_kv,
                INLINE_READ_ENTRIES,
            )?;
            if let Some(batch) = few {
                return Ok(batch);
            }
        }
        let store = self.store.clone();
        revkv_raft::runtime::offload(move || match strictness {
            Strictness::Strict => store.events_since(from, max_events, with_prev_kv),
            Strictness::MayStartAtCompactRevision => {
                store.events_from_start(from, max_events, with_prev_kv)
            }
        })
        .await
        .map_err(|join_error| {
            ReadError::Storage(StorageFailure::Invariant(format!(
                "watch hub read panicked: {join_error}"
            )))
        })?
    }

    /// The store could not be read: synced watchers are canceled so that they resume elsewhere
    /// rather than wait on a member that cannot serve them. Answers false (the round failed).
    fn fail_synced_watchers(&self, error: &str) -> bool {
        tracing::error!(error, "watch hub could not read the history");
        self.registry.fail_synced_watchers();
        false
    }
}
