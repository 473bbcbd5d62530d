//! Catch-up of a watch that starts in the past: it reads the store's history from its start
//! revision in bounded batches, waiting for the reader as a normal stream would (a catching-up
//! reader is never "slow": it asked for the history), until it is close enough to the hub's
//! broadcast point to join under the hub's lock (see `registry.rs` for the hand-over argument).
//! It reaches the registry only through its [`CatchUpHandle`].
//!
//! Each batch goes to the reader as one delivery, so that a writer sends it in one response, as
//! etcd sends a catch-up. The catch-up waits until the reader has emptied the buffer before it
//! reads on, so a catching-up watch holds at most two batches in memory: one in the buffer and
//! one being handed out.
//!
//! As in etcd, a watch may start at the compact revision itself: its first read (at the start
//! revision, before anything was delivered) is the store's `events_from_start`, which serves the
//! puts that remain there. Every later read is strict, because a watch that has delivered
//! revisions before needs each following revision whole, deletes included.

use std::sync::Arc;

use revkv_storage::{Event, EventBatch, MvccStore, ReadError, StorageFailure};
use tokio::sync::Semaphore;

use super::channel::DeliverySender;
use super::events::history_for;
use super::filter::EventFilter;
use super::limits::WatchLimits;
use super::message::CancelReason;
use super::registry::{CatchUpHandle, HandOver};

/// One watcher's catch-up task.
pub(super) struct CatchUp {
    pub handle: CatchUpHandle,
    pub store: Arc<MvccStore>,
    pub limits: WatchLimits,
    /// Bounds how many catch-up reads run at once, across the hub.
    pub reads: Arc<Semaphore>,
    pub sender: DeliverySender,
    pub filter: EventFilter,
    pub prev_kv: bool,
    /// The revision the watch asked to start at.
    pub start: u64,
    /// The first revision not yet delivered.
    pub position: u64,
}

impl CatchUp {
    /// Runs until the watcher joins the hub or ends.
    pub async fn run(mut self) {
        // Only the catch-up sends to a watcher that is not synced yet, so once the whole buffer is
        // free it stays free for the next batch or for the hand-over's delivery and bookmark.
        loop {
            if !self.handle.note_position(self.position) {
                return;
            }
            // Wait until the reader has taken everything delivered so far; the permits are
            // released at once.
            if self.sender.wait_until_empty().await.is_err() {
                return self.handle.remove();
            }
            match self.try_join().await {
                Some(HandOver::Joined) | Some(HandOver::Ended) => return,
                Some(HandOver::TooFarBehind) => {}
                None => return,
            }
            if !self.deliver_next_batch().await {
                return;
            }
        }
    }

    /// Tries the hand-over on a blocking thread: it reads the store under the hub's lock.
    async fn try_join(&self) -> Option<HandOver> {
        let store = self.store.clone();
        let batch_events = self.limits.read_batch_events;
        let (start, position) = (self.start, self.position);
        let handle = self.handle.clone();
        revkv_raft::runtime::offload(move || {
            handle.hand_over(position, |from, through, prev_kv| {
                read_range(&store, batch_events, start, from, through, prev_kv)
            })
        })
        .await
        .ok()
    }

    /// Reads and sends one batch of history; false when the watch ended.
    async fn deliver_next_batch(&mut self) -> bool {
        let batch = match self.read_batch().await {
            Ok(batch) => batch,
            Err(ReadError::Compacted {
                compact_revision, ..
            }) => {
                self.handle
                    .cancel(CancelReason::Compacted, Some(compact_revision));
                return false;
            }
            Err(error) => {
                tracing::error!(%error, watch_id = self.handle.id(), "watch catch-up read failed");
                self.handle.cancel(CancelReason::Internal, None);
                return false;
            }
        };
        if let Some(history) = history_for(&self.filter, self.prev_kv, batch.events) {
            if self.sender.send(history).await.is_err() {
                self.handle.remove();
                return false;
            }
        }
        assert!(
            batch.next_revision > self.position,
            "catch-up always moves forward"
        );
        self.position = batch.next_revision;
        true
    }

    async fn read_batch(&self) -> Result<EventBatch, ReadError> {
        // Holding a permit bounds how many catch-up reads run at once.
        let _permit = self.reads.acquire().await;
        let store = self.store.clone();
        let (start, position, max_events, prev_kv) = (
            self.start,
            self.position,
            self.limits.read_batch_events,
            self.prev_kv,
        );
        revkv_raft::runtime::offload(move || {
            read_events(&store, start, position, max_events, prev_kv)
        })
        .await
        .map_err(|error| {
            ReadError::Storage(StorageFailure::Invariant(format!(
                "catch-up read panicked: {error}"
            )))
        })?
    }
}

/// History from `from` for a watch that asked to start at `start`: at its start the read may begin
/// at the compact revision (nothing was delivered yet), after it the read is strict.
fn read_events(
    store: &MvccStore,
    start: u64,
    from: u64,
    max_events: usize,
    prev_kv: bool,
) -> Result<EventBatch, ReadError> {
    debug_assert!(from >= start, "a catch-up never reads before its start");
    if from == start {
        store.events_from_start(from, max_events, prev_kv)
    } else {
        store.events_since(from, max_events, prev_kv)
    }
}

/// Every event with revision in `from..=through`, whole revisions at a time.
fn read_range(
    store: &MvccStore,
    batch_events: usize,
    start: u64,
    from: u64,
    through: u64,
    prev_kv: bool,
) -> Result<Vec<Event>, ReadError> {
    let mut events = Vec::new();
    let mut next = from;
    while next <= through {
        let batch = read_events(store, start, next, batch_events, prev_kv)?;
        events.extend(
            batch
                .events
                .into_iter()
                .filter(|event| event.kv.mod_revision <= through),
        );
        // The store never answers with less than one whole revision, so this moves forward.
        assert!(
            batch.next_revision > next,
            "history reads always make progress"
        );
        next = batch.next_revision;
    }
    Ok(events)
}
