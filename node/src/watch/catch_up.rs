//! Catch-up of a watch that starts in the past: it reads the store's history from its start
//! revision in bounded batches, waiting for the reader as a normal stream would (a catching-up
//! reader is never "slow": it asked for the history), until it is close enough to the hub's
//! broadcast point to join under the hub's lock (see `hub.rs` for the hand-over argument).

use std::sync::Arc;

use revkv_storage::{Error as StorageError, EventBatch};
use tokio::sync::mpsc;

use super::broadcast::{group_by_revision, message_for};
use super::filter::EventFilter;
use super::hand_over::HandOver;
use super::hub::WatchHub;
use super::message::{CancelReason, WatchMessage};

/// One watcher's catch-up task.
pub(super) struct CatchUp {
    pub hub: Arc<WatchHub>,
    pub watch_id: u64,
    pub sender: mpsc::Sender<WatchMessage>,
    pub filter: EventFilter,
    pub prev_kv: bool,
    /// The first revision not yet delivered.
    pub position: u64,
}

impl CatchUp {
    /// Runs until the watcher joins the hub or ends.
    pub async fn run(mut self) {
        let limits = self.hub.limits.clone();
        // The hand-over may send this many messages without waiting; see `try_join`.
        let hand_over_room = limits.handover_max_revisions as usize + 1;
        loop {
            if !self
                .hub
                .note_catch_up_position(self.watch_id, self.position)
            {
                return;
            }
            // Wait until the reader has left room for the hand-over's messages; the permits are
            // released at once, and nothing else sends to a watcher that is not synced yet.
            match self.sender.reserve_many(hand_over_room).await {
                Ok(permits) => drop(permits),
                Err(_) => return self.hub.remove(self.watch_id),
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

    async fn try_join(&self) -> Option<HandOver> {
        let hub = self.hub.clone();
        let (id, position) = (self.watch_id, self.position);
        tokio::task::spawn_blocking(move || hub.hand_over(id, position))
            .await
            .ok()
    }

    /// Reads and sends one batch of history; false when the watch ended.
    async fn deliver_next_batch(&mut self) -> bool {
        let batch = match self.read_batch().await {
            Ok(batch) => batch,
            Err(StorageError::Compacted {
                compact_revision, ..
            }) => {
                self.hub.cancel_watch(
                    self.watch_id,
                    CancelReason::Compacted,
                    Some(compact_revision),
                );
                return false;
            }
            Err(error) => {
                tracing::error!(%error, watch_id = self.watch_id, "watch catch-up read failed");
                self.hub
                    .cancel_watch(self.watch_id, CancelReason::Internal, None);
                return false;
            }
        };
        for (revision, events) in group_by_revision(batch.events) {
            if let Some(message) = message_for(&self.filter, self.prev_kv, revision, &events) {
                if self.sender.send(message).await.is_err() {
                    self.hub.remove(self.watch_id);
                    return false;
                }
            }
        }
        assert!(
            batch.next_revision > self.position,
            "catch-up always moves forward"
        );
        self.position = batch.next_revision;
        true
    }

    async fn read_batch(&self) -> Result<EventBatch, StorageError> {
        // Holding a permit bounds how many catch-up reads run at once.
        let _permit = self.hub.catch_up_reads.acquire().await;
        let store = self.hub.store.clone();
        let (position, max_events, prev_kv) = (
            self.position,
            self.hub.limits.read_batch_events,
            self.prev_kv,
        );
        tokio::task::spawn_blocking(move || store.events_since(position, max_events, prev_kv))
            .await
            .map_err(|error| StorageError::Invariant(format!("catch-up read panicked: {error}")))?
    }
}
