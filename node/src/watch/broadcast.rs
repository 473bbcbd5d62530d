//! The hub's broadcast loop: follows the applied revision, reads each new slice of history once,
//! and offers every revision's events to the synced watchers, then the bookmarks that became due.
//! What happens when the hub's next revision was compacted away, or the store cannot be read, is
//! here too.

use std::sync::Arc;
use std::time::Duration;

use revkv_storage::{Error as StorageError, Event, EventBatch};
use tokio::sync::mpsc;

use super::feed::RevisionFeed;
use super::filter::EventFilter;
use super::hub::{HubState, WatchHub};
use super::message::{CancelReason, RevisionEvents, WatchMessage};

/// How long the hub waits before reading the store again after a failed read.
const READ_RETRY_DELAY: Duration = Duration::from_millis(100);

impl WatchHub {
    /// Follows the applied revision until the hub stops or the feed ends.
    pub(super) async fn broadcast_loop(self: Arc<Self>, mut feed: impl RevisionFeed) {
        let mut stop = self.stop.subscribe();
        let mut applied = feed.current();
        loop {
            while self.lock().broadcast_through < applied && !*stop.borrow() {
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
                _ = stop.wait_for(|stopped| *stopped) => break,
            }
        }
        tracing::debug!("watch hub stopped");
    }

    /// Reads the next slice of history after the broadcast point and offers it to synced watchers.
    /// False when the store could not be read.
    pub(super) async fn broadcast_round(&self) -> bool {
        let (from, with_prev_kv) = {
            let state = self.lock();
            (state.broadcast_through + 1, state.synced_with_prev_kv > 0)
        };
        let store = self.store.clone();
        let max_events = self.limits.read_batch_events;
        let read =
            tokio::task::spawn_blocking(move || store.events_since(from, max_events, with_prev_kv))
                .await;
        let batch = match read {
            Ok(Ok(batch)) => batch,
            Ok(Err(StorageError::Compacted {
                compact_revision, ..
            })) => {
                self.fall_behind_compaction(compact_revision);
                return true;
            }
            Ok(Err(error)) => {
                self.fail_synced_watchers(&error.to_string());
                return false;
            }
            Err(join_error) => {
                self.fail_synced_watchers(&join_error.to_string());
                return false;
            }
        };
        let mut state = self.lock();
        assert_eq!(
            state.broadcast_through + 1,
            from,
            "only the broadcast loop moves the broadcast point"
        );
        if !with_prev_kv && state.synced_with_prev_kv > 0 {
            // A watcher wanting prev_kv joined while the batch was read without it: read again.
            return true;
        }
        Self::offer_batch(&mut state, batch);
        true
    }

    pub(super) fn offer_batch(state: &mut HubState, batch: EventBatch) {
        let through = batch.next_revision - 1;
        for (revision, events) in group_by_revision(batch.events) {
            Self::offer_revision(state, revision, &events);
            state.broadcast_through = revision;
        }
        debug_assert!(through >= state.broadcast_through);
        state.broadcast_through = through;
        Self::serve_owed_bookmarks(state, None);
    }

    /// Offers one revision's events to every synced watcher that has not passed it.
    pub(super) fn offer_revision(state: &mut HubState, revision: u64, events: &Arc<Vec<Event>>) {
        let mut overflowing = Vec::new();
        let mut closed = Vec::new();
        for (&id, watcher) in state.watchers.iter_mut() {
            if !watcher.synced || watcher.deliver_from > revision {
                continue;
            }
            watcher.deliver_from = revision + 1;
            let Some(message) = message_for(&watcher.filter, watcher.prev_kv, revision, events)
            else {
                continue;
            };
            match watcher.sender.try_send(message) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // Everything below this revision is in the buffer; this one is not.
                    watcher.deliver_from = revision;
                    overflowing.push(id);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => closed.push(id),
            }
        }
        for id in overflowing {
            Self::cancel_behind(state, id, CancelReason::SlowConsumer, None);
        }
        for id in closed {
            Self::drop_watcher(state, id);
        }
    }

    /// The hub's next revision was compacted away (a snapshot install or a compaction raced
    /// ahead of it): every synced watcher that still needed a compacted revision is canceled with
    /// the compact revision, and the hub continues after it.
    pub(super) fn fall_behind_compaction(&self, compact_revision: u64) {
        let mut state = self.lock();
        // Watchers that start after the compacted revisions never needed them.
        let behind: Vec<u64> = state
            .watchers
            .iter()
            .filter(|(_, watcher)| watcher.synced && watcher.deliver_from <= compact_revision)
            .map(|(&id, _)| id)
            .collect();
        tracing::warn!(
            compact_revision,
            watchers = behind.len(),
            "watch hub fell behind a compaction; canceling the watches that needed it"
        );
        for id in behind {
            Self::cancel_behind(
                &mut state,
                id,
                CancelReason::Compacted,
                Some(compact_revision),
            );
        }
        state.broadcast_through = state.broadcast_through.max(compact_revision);
    }

    /// The store could not be read: synced watchers are canceled so that they resume elsewhere
    /// rather than wait on a member that cannot serve them.
    pub(super) fn fail_synced_watchers(&self, error: &str) {
        tracing::error!(error, "watch hub could not read the history");
        let mut state = self.lock();
        for id in synced_ids(&state) {
            Self::cancel_behind(&mut state, id, CancelReason::Internal, None);
        }
    }
}

pub(super) fn synced_ids(state: &HubState) -> Vec<u64> {
    state
        .watchers
        .iter()
        .filter(|(_, watcher)| watcher.synced)
        .map(|(&id, _)| id)
        .collect()
}

/// The message for one revision's events as `filter` sees them, or `None` when none match.
pub(super) fn message_for(
    filter: &EventFilter,
    prev_kv: bool,
    revision: u64,
    events: &Arc<Vec<Event>>,
) -> Option<WatchMessage> {
    let selected = filter.select(events);
    if selected.as_ref().is_some_and(Vec::is_empty) {
        return None;
    }
    Some(WatchMessage::Events(RevisionEvents::new(
        revision,
        events.clone(),
        selected,
        prev_kv,
    )))
}

/// Splits history (in revision order) into one shared list of events per revision. Every event
/// of a revision carries that revision as its `mod_revision`, deletes included.
pub(super) fn group_by_revision(events: Vec<Event>) -> Vec<(u64, Arc<Vec<Event>>)> {
    let mut groups: Vec<(u64, Vec<Event>)> = Vec::new();
    for event in events {
        let revision = event.kv.mod_revision;
        match groups.last_mut() {
            Some((last, group)) if *last == revision => group.push(event),
            Some((last, _)) => {
                assert!(*last < revision, "history comes in revision order");
                groups.push((revision, vec![event]));
            }
            None => groups.push((revision, vec![event])),
        }
    }
    groups
        .into_iter()
        .map(|(revision, events)| (revision, Arc::new(events)))
        .collect()
}
