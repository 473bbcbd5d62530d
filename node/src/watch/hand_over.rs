//! The hand-over of a catching-up watch to the live stream.
//!
//! A catching-up watcher joins under the hub's lock: it reads the revisions it still misses up to
//! `broadcast_through` while the lock holds `broadcast_through` still, enqueues them, and sets
//! `deliver_from` past both the broadcast point and whatever the catch-up already read. The hub
//! offers a revision only to watchers with `deliver_from <= revision`, so no revision is missed or
//! sent twice.

use revkv_storage::{Error as StorageError, Event};

use super::broadcast::{group_by_revision, message_for};
use super::hub::WatchHub;
use super::message::CancelReason;

/// How a hand-over attempt ended.
pub(super) enum HandOver {
    /// The watcher is synced now.
    Joined,
    /// Too many revisions are still missing to read them under the lock: catch up more first.
    TooFarBehind,
    /// The watcher was canceled or closed; the catch-up ends.
    Ended,
}

impl WatchHub {
    /// Tries to make a catching-up watcher synced, reading the revisions it still misses under the
    /// lock. Blocking: called on a blocking thread. The caller made sure the watcher's buffer has
    /// room for `handover_max_revisions + 1` messages.
    pub(super) fn hand_over(&self, id: u64, position: u64) -> HandOver {
        let mut state = self.lock();
        let broadcast_through = state.broadcast_through;
        let Some(watcher) = state.watchers.get(&id) else {
            return HandOver::Ended;
        };
        debug_assert!(!watcher.synced);
        if position <= broadcast_through
            && broadcast_through - position >= self.limits.handover_max_revisions
        {
            return HandOver::TooFarBehind;
        }
        let missing = match self.read_range(position, broadcast_through, watcher.prev_kv) {
            Ok(events) => events,
            Err(StorageError::Compacted {
                compact_revision, ..
            }) => {
                Self::cancel(
                    &mut state,
                    id,
                    CancelReason::Compacted,
                    Some(compact_revision),
                );
                return HandOver::Ended;
            }
            Err(error) => {
                tracing::error!(%error, watch_id = id, "catch-up hand-over could not read history");
                Self::cancel(&mut state, id, CancelReason::Internal, None);
                return HandOver::Ended;
            }
        };
        let watcher = state
            .watchers
            .get_mut(&id)
            .expect("checked above, under the same lock");
        for (revision, events) in group_by_revision(missing) {
            if let Some(message) = message_for(&watcher.filter, watcher.prev_kv, revision, &events)
            {
                if watcher.sender.try_send(message).is_err() {
                    // The caller reserved room, so only a closed stream gets here.
                    Self::drop_watcher(&mut state, id);
                    return HandOver::Ended;
                }
            }
        }
        watcher.synced = true;
        watcher.deliver_from = watcher
            .deliver_from
            .max(position)
            .max(broadcast_through + 1);
        state.synced_with_prev_kv += usize::from(watcher.prev_kv);
        Self::serve_owed_bookmarks(&mut state, Some(id));
        HandOver::Joined
    }

    /// Records how far a catching-up watcher has got, so a cancellation reports it.
    pub(super) fn note_catch_up_position(&self, id: u64, position: u64) -> bool {
        let mut state = self.lock();
        match state.watchers.get_mut(&id) {
            Some(watcher) => {
                watcher.deliver_from = position;
                true
            }
            None => false,
        }
    }

    /// Every event with revision in `from..=through`, whole revisions at a time.
    pub(super) fn read_range(
        &self,
        from: u64,
        through: u64,
        prev_kv: bool,
    ) -> Result<Vec<Event>, StorageError> {
        let mut events = Vec::new();
        let mut next = from;
        while next <= through {
            let batch = self
                .store
                .events_since(next, self.limits.read_batch_events, prev_kv)?;
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
}
