//! The watchers' registry: the hub's only mutable state, and the one file that takes its lock.
//!
//! Ordering argument. Everything a watcher receives goes through one channel, and everything the
//! hub puts in a synced watcher's channel is put there under this lock, in revision order: events
//! of revision R for every synced watcher, then `broadcast_through = R`, then owed bookmarks with
//! revision `max(broadcast_through, deliver_from - 1)`. So a bookmark never overtakes an event at
//! or below its revision (etcd issue 15220), and a bookmark owed to a watcher still catching up is
//! sent the moment it joins (etcd issue 17507).
//!
//! Hand-over argument. A catching-up watcher joins under the lock: it reads the revisions it still
//! misses up to `broadcast_through` while the lock holds `broadcast_through` still, enqueues them,
//! and sets `deliver_from` past both the broadcast point and whatever the catch-up already read.
//! The broadcast offers a revision only to watchers with `deliver_from <= revision`, so no revision
//! is missed or sent twice.
//!
//! Because every method here takes the lock itself and no guard leaves this file, both arguments
//! can be checked by reading this file alone. The rest of the hub reaches the registry through
//! narrow handles: [`CatchUpHandle`] for a catch-up task, [`StreamHandle`] for a stream.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use revkv_metrics::{WatchBufferBound, WatcherGuard};
use revkv_storage::{Event, EventBatch, ReadError};

use super::channel::{DeliverySender, Refused};
use super::events::{group_by_revision, history_for, revision_events_for};
use super::filter::EventFilter;
use super::message::{CancelReason, Cancellation, Delivery, Ending, WatchMessage};
use crate::error::NodeError;

/// The registry of one hub's watchers.
pub(super) struct Registry {
    state: Mutex<State>,
    max_watchers: usize,
    handover_max_revisions: u64,
}

struct State {
    /// Every revision at or below this has been offered to every synced watcher.
    broadcast_through: u64,
    /// Ordered maps, not hash maps, so that watchers are offered events in the same order on
    /// every run: the simulator (issue 37) replays runs event for event, and a hash map's order
    /// changes with its random seed.
    watchers: BTreeMap<u64, Watcher>,
    /// How many synced watchers want `prev_kv`; the hub reads prev_kv only when some do.
    synced_with_prev_kv: usize,
    /// Watchers owed a bookmark, so serving them does not scan every watcher.
    owed_bookmarks: BTreeSet<u64>,
    stopped: bool,
}

/// The hub's side of one watch.
struct Watcher {
    filter: EventFilter,
    prev_kv: bool,
    sender: DeliverySender,
    ending: Arc<Ending>,
    /// The revision the watch asked to start at. While `deliver_from` still equals it, the
    /// watcher has been given nothing, so it may start at the compact revision (see
    /// `Registry::fall_behind_compaction`).
    start: u64,
    /// True once the watcher receives live events from the hub.
    synced: bool,
    /// The first revision this watcher has not yet been given (nor skipped as not matching).
    deliver_from: u64,
    /// A bookmark owed to this watcher must reach at least this revision.
    bookmark_owed: Option<u64>,
    /// Counts this watcher in the open-watchers gauge until it leaves the hub, and counts its
    /// end if the hub ends it for falling behind.
    counted: Option<WatcherGuard>,
}

/// What a new watcher is registered with.
pub(super) struct NewWatcher {
    pub id: u64,
    pub filter: EventFilter,
    pub prev_kv: bool,
    /// The first revision to deliver.
    pub start: u64,
    pub sender: DeliverySender,
    pub ending: Arc<Ending>,
    pub counted: Option<WatcherGuard>,
}

/// How a hand-over attempt ended.
pub(super) enum HandOver {
    /// The watcher is synced now.
    Joined,
    /// Too many revisions are still missing to read them under the lock: catch up more first.
    TooFarBehind,
    /// The watcher was canceled or closed; the catch-up ends.
    Ended,
}

impl Registry {
    pub fn new(broadcast_through: u64, max_watchers: usize, handover_max_revisions: u64) -> Self {
        Registry {
            state: Mutex::new(State {
                broadcast_through,
                watchers: BTreeMap::new(),
                synced_with_prev_kv: 0,
                owed_bookmarks: BTreeSet::new(),
                stopped: false,
            }),
            max_watchers,
            handover_max_revisions,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain bookkeeping behind, never a half-sent
        // message, so the state is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn broadcast_through(&self) -> u64 {
        self.lock().broadcast_through
    }

    pub fn watcher_count(&self) -> usize {
        self.lock().watchers.len()
    }

    /// Moves the broadcast point towards `applied` without reading history, as far as no synced
    /// watcher needs: up to the revision before the lowest `deliver_from` of the synced watchers,
    /// or to `applied` when none is synced. Watchers still catching up read what they miss
    /// themselves, up to the broadcast point, so they lose nothing. With no watcher at all, a write
    /// costs the hub this one call. Answers the broadcast point after the move.
    pub fn fast_forward(&self, applied: u64) -> u64 {
        let mut state = self.lock();
        let first_wanted = state
            .watchers
            .values()
            .filter(|watcher| watcher.synced)
            .map(|watcher| watcher.deliver_from)
            .min();
        let target = first_wanted.map_or(applied, |from| applied.min(from.saturating_sub(1)));
        if target > state.broadcast_through {
            state.broadcast_through = target;
            state.serve_owed_bookmarks(None);
        }
        state.broadcast_through
    }

    /// The next revision to broadcast, and whether some synced watcher wants prev_kv.
    pub fn next_broadcast(&self) -> (u64, bool) {
        let state = self.lock();
        (state.broadcast_through + 1, state.synced_with_prev_kv > 0)
    }

    /// Adds a watcher; answers whether it must catch up from history before it can join.
    pub fn register(&self, new: NewWatcher) -> Result<bool, NodeError> {
        let mut state = self.lock();
        if state.stopped {
            return Err(NodeError::Unavailable {
                reason: "the member is stopping".into(),
                retry_after: Duration::from_secs(1),
            });
        }
        if state.watchers.len() >= self.max_watchers {
            return Err(NodeError::Unavailable {
                reason: format!(
                    "this member already serves its maximum of {} watches",
                    self.max_watchers
                ),
                retry_after: Duration::from_secs(1),
            });
        }
        // A watch starting after everything broadcast so far has no history to read: it is synced
        // from the start, and the hub skips revisions below its start.
        let synced = new.start > state.broadcast_through;
        state.synced_with_prev_kv += usize::from(synced && new.prev_kv);
        let watcher = Watcher {
            filter: new.filter,
            prev_kv: new.prev_kv,
            sender: new.sender,
            ending: new.ending,
            start: new.start,
            synced,
            deliver_from: new.start,
            bookmark_owed: None,
            counted: new.counted,
        };
        state.watchers.insert(new.id, watcher);
        Ok(!synced)
    }

    /// Records that watch `id` is owed a bookmark reaching at least `at_least`, and sends it now
    /// if the watcher is synced and the hub has got that far. False when there is no such watch.
    pub fn owe_bookmark(&self, id: u64, at_least: u64) -> bool {
        let mut state = self.lock();
        let Some(watcher) = state.watchers.get_mut(&id) else {
            return false;
        };
        watcher.bookmark_owed = Some(
            watcher
                .bookmark_owed
                .map_or(at_least, |owed| owed.max(at_least)),
        );
        state.owed_bookmarks.insert(id);
        state.serve_owed_bookmarks(Some(id));
        true
    }

    /// Forgets a watch whose reader went away.
    pub fn remove(&self, id: u64) {
        self.lock().drop_watcher(id);
    }

    /// Ends every watch with `CANCELED member_stopping` and refuses new ones.
    pub fn stop(&self) {
        let mut state = self.lock();
        state.stopped = true;
        let ids: Vec<u64> = state.watchers.keys().copied().collect();
        for id in ids {
            state.cancel(id, CancelReason::MemberStopping, None);
        }
    }

    /// Ends watch `id` with `reason`: records why, then drops the hub's sender so the stream ends
    /// after the messages already in its buffer.
    pub fn cancel(&self, id: u64, reason: CancelReason, compact_revision: Option<u64>) {
        self.lock().cancel(id, reason, compact_revision);
    }

    /// Offers a batch read from `from` to the synced watchers, then the bookmarks that became due.
    /// When a watcher wanting prev_kv joined while the batch was read without it, the batch is
    /// dropped and the broadcast point stays, so the next round reads it again.
    pub fn offer_batch(&self, from: u64, read_with_prev_kv: bool, batch: EventBatch) {
        let mut state = self.lock();
        assert_eq!(
            state.broadcast_through + 1,
            from,
            "only the broadcast loop moves the broadcast point"
        );
        if !read_with_prev_kv && state.synced_with_prev_kv > 0 {
            return;
        }
        let through = batch.next_revision - 1;
        for (revision, events) in group_by_revision(batch.events) {
            state.offer_revision(revision, &events);
            state.broadcast_through = revision;
        }
        debug_assert!(through >= state.broadcast_through);
        state.broadcast_through = through;
        state.serve_owed_bookmarks(None);
    }

    /// The hub's next revision was compacted away (a snapshot install or a compaction raced
    /// ahead of it): every synced watcher that still needed a compacted revision is canceled with
    /// the compact revision, and the hub continues after it.
    ///
    /// A watcher that asked to start at the compact revision itself and has been given nothing
    /// yet is served there, as etcd serves it (the puts at that revision remain). Answers whether
    /// such watchers wait: then the broadcast point stays just below the compact revision, and the
    /// caller reads it with `events_from_start` and offers that batch. Every other synced watcher
    /// left starts after the compact revision, so none of them misses the deletes that are gone.
    pub fn fall_behind_compaction(&self, compact_revision: u64) -> bool {
        let mut state = self.lock();
        let starts_at_compact_revision = |watcher: &Watcher| {
            watcher.deliver_from == compact_revision && watcher.start == compact_revision
        };
        // Watchers that start after the compacted revisions never needed them.
        let behind: Vec<u64> = state
            .watchers
            .iter()
            .filter(|(_, watcher)| {
                watcher.synced
                    && watcher.deliver_from <= compact_revision
                    && !starts_at_compact_revision(watcher)
            })
            .map(|(&id, _)| id)
            .collect();
        tracing::warn!(
            compact_revision,
            watchers = behind.len(),
            "watch hub fell behind a compaction; canceling the watches that needed it"
        );
        for id in behind {
            state.cancel_behind(id, CancelReason::Compacted, Some(compact_revision));
        }
        let served_at_compact_revision = state
            .watchers
            .values()
            .any(|watcher| watcher.synced && starts_at_compact_revision(watcher));
        let skip_through = if served_at_compact_revision {
            compact_revision - 1
        } else {
            compact_revision
        };
        state.broadcast_through = state.broadcast_through.max(skip_through);
        served_at_compact_revision
    }

    /// The store could not be read: synced watchers are canceled so that they resume elsewhere
    /// rather than wait on a member that cannot serve them.
    pub fn fail_synced_watchers(&self) {
        let mut state = self.lock();
        let synced: Vec<u64> = state
            .watchers
            .iter()
            .filter(|(_, watcher)| watcher.synced)
            .map(|(&id, _)| id)
            .collect();
        for id in synced {
            state.cancel_behind(id, CancelReason::Internal, None);
        }
    }

    /// Records how far a catching-up watcher has got, so a cancellation reports it.
    fn note_catch_up_position(&self, id: u64, position: u64) -> bool {
        let mut state = self.lock();
        match state.watchers.get_mut(&id) {
            Some(watcher) => {
                watcher.deliver_from = position;
                true
            }
            None => false,
        }
    }

    /// Tries to make a catching-up watcher synced, reading the revisions it still misses (with
    /// `read_missing(from, through, prev_kv)`) under the lock. Blocking. The caller made sure the
    /// watcher's buffer is empty (room for the delivery of what it misses and a bookmark).
    fn hand_over(
        &self,
        id: u64,
        position: u64,
        read_missing: impl FnOnce(u64, u64, bool) -> Result<Vec<Event>, ReadError>,
    ) -> HandOver {
        let mut state = self.lock();
        let broadcast_through = state.broadcast_through;
        let Some(watcher) = state.watchers.get(&id) else {
            return HandOver::Ended;
        };
        debug_assert!(!watcher.synced);
        if position <= broadcast_through
            && broadcast_through - position >= self.handover_max_revisions
        {
            return HandOver::TooFarBehind;
        }
        let missing = match read_missing(position, broadcast_through, watcher.prev_kv) {
            Ok(events) => events,
            Err(ReadError::Compacted {
                compact_revision, ..
            }) => {
                state.cancel(id, CancelReason::Compacted, Some(compact_revision));
                return HandOver::Ended;
            }
            Err(error) => {
                tracing::error!(%error, watch_id = id, "catch-up hand-over could not read history");
                state.cancel(id, CancelReason::Internal, None);
                return HandOver::Ended;
            }
        };
        state.join(id, position, broadcast_through, missing)
    }
}

impl State {
    /// Enqueues a catching-up watcher's missing events and makes it synced (under the lock).
    fn join(
        &mut self,
        id: u64,
        position: u64,
        broadcast_through: u64,
        missing: Vec<Event>,
    ) -> HandOver {
        let watcher = self
            .watchers
            .get_mut(&id)
            .expect("checked by the caller, under the same lock");
        if let Some(history) = history_for(&watcher.filter, watcher.prev_kv, missing) {
            if watcher.sender.try_send(history).is_err() {
                // The caller waited for an empty buffer, so only a closed stream gets here.
                self.drop_watcher(id);
                return HandOver::Ended;
            }
        }
        watcher.synced = true;
        watcher.deliver_from = watcher
            .deliver_from
            .max(position)
            .max(broadcast_through + 1);
        self.synced_with_prev_kv += usize::from(watcher.prev_kv);
        self.serve_owed_bookmarks(Some(id));
        HandOver::Joined
    }

    /// Offers one revision's events to every synced watcher that has not passed it.
    fn offer_revision(&mut self, revision: u64, events: &Arc<Vec<Event>>) {
        let mut overflowing = Vec::new();
        let mut closed = Vec::new();
        for (&id, watcher) in self.watchers.iter_mut() {
            if !watcher.synced || watcher.deliver_from > revision {
                continue;
            }
            watcher.deliver_from = revision + 1;
            let Some(events) =
                revision_events_for(&watcher.filter, watcher.prev_kv, revision, events)
            else {
                continue;
            };
            match watcher
                .sender
                .try_send(Delivery::Message(WatchMessage::Events(events)))
            {
                Ok(()) => {}
                Err(Refused::Full(bound)) => {
                    // Everything below this revision is in the buffer; this one is not.
                    watcher.deliver_from = revision;
                    overflowing.push((id, bound));
                }
                Err(Refused::Closed) => closed.push(id),
            }
        }
        for (id, bound) in overflowing {
            self.cancel_slow_consumer(id, bound);
        }
        for id in closed {
            self.drop_watcher(id);
        }
    }

    fn cancel(&mut self, id: u64, reason: CancelReason, compact_revision: Option<u64>) {
        let broadcast_through = self.broadcast_through;
        let Some(watcher) = self.watchers.get(&id) else {
            return;
        };
        // A synced watcher has everything through the broadcast point (or up to its start); a
        // catching-up one has at least what precedes its position. The stream raises this to the
        // last revision it actually delivered.
        let complete_through = if watcher.synced {
            broadcast_through.max(watcher.deliver_from - 1)
        } else {
            watcher.deliver_from - 1
        };
        watcher.ending.set(Cancellation {
            reason,
            compact_revision,
            last_revision: Some(complete_through),
        });
        self.drop_watcher(id);
    }

    /// Cancels a watcher that has everything below its `deliver_from` and nothing after.
    fn cancel_behind(&mut self, id: u64, reason: CancelReason, compact_revision: Option<u64>) {
        if let Some(watcher) = self.watchers.get(&id) {
            watcher.ending.set(Cancellation {
                reason,
                compact_revision,
                last_revision: Some(watcher.deliver_from - 1),
            });
        }
        self.drop_watcher(id);
    }

    /// Cancels a watcher whose buffer is full by `bound` (`slow_consumer`), counted here, where
    /// the hub decides, not when the reader reaches the CANCELED message: a client that stopped
    /// reading may never reach it.
    fn cancel_slow_consumer(&mut self, id: u64, bound: WatchBufferBound) {
        if let Some(counted) = self
            .watchers
            .get(&id)
            .and_then(|watcher| watcher.counted.as_ref())
        {
            counted.record_slow_consumer_cancel(bound);
        }
        self.cancel_behind(id, CancelReason::SlowConsumer, None);
    }

    fn drop_watcher(&mut self, id: u64) {
        if let Some(watcher) = self.watchers.remove(&id) {
            self.synced_with_prev_kv -= usize::from(watcher.synced && watcher.prev_kv);
            self.owed_bookmarks.remove(&id);
        }
    }

    /// Sends the bookmarks that are due: to `only` if given, else to every watcher owed one.
    fn serve_owed_bookmarks(&mut self, only: Option<u64>) {
        let candidates: Vec<u64> = match only {
            Some(id) => vec![id],
            None => self.owed_bookmarks.iter().copied().collect(),
        };
        let broadcast_through = self.broadcast_through;
        let mut overflowing = Vec::new();
        let mut closed = Vec::new();
        for id in candidates {
            let Some(watcher) = self.watchers.get_mut(&id) else {
                continue;
            };
            let Some(owed) = watcher.bookmark_owed.filter(|_| watcher.synced) else {
                continue;
            };
            let revision = broadcast_through.max(watcher.deliver_from - 1);
            if revision < owed {
                continue;
            }
            watcher.bookmark_owed = None;
            self.owed_bookmarks.remove(&id);
            match watcher
                .sender
                .try_send(Delivery::Message(WatchMessage::Bookmark { revision }))
            {
                Ok(()) => {}
                Err(Refused::Full(bound)) => overflowing.push((id, bound)),
                Err(Refused::Closed) => closed.push(id),
            }
        }
        for (id, bound) in overflowing {
            self.cancel_slow_consumer(id, bound);
        }
        for id in closed {
            self.drop_watcher(id);
        }
    }
}

/// What a catch-up task may do with its own watcher, and nothing else.
#[derive(Clone)]
pub(super) struct CatchUpHandle {
    registry: Arc<Registry>,
    id: u64,
}

impl CatchUpHandle {
    pub fn new(registry: Arc<Registry>, id: u64) -> Self {
        CatchUpHandle { registry, id }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Records the catch-up's position; false once the watch is gone.
    pub fn note_position(&self, position: u64) -> bool {
        self.registry.note_catch_up_position(self.id, position)
    }

    /// See [`Registry::hand_over`]. Blocking.
    pub fn hand_over(
        &self,
        position: u64,
        read_missing: impl FnOnce(u64, u64, bool) -> Result<Vec<Event>, ReadError>,
    ) -> HandOver {
        self.registry.hand_over(self.id, position, read_missing)
    }

    pub fn cancel(&self, reason: CancelReason, compact_revision: Option<u64>) {
        self.registry.cancel(self.id, reason, compact_revision);
    }

    /// The reader went away.
    pub fn remove(&self) {
        self.registry.remove(self.id);
    }
}

/// What a stream may do with its own watcher: ask for bookmarks, and leave when dropped.
pub(super) struct StreamHandle {
    registry: Arc<Registry>,
    id: u64,
}

impl StreamHandle {
    pub fn new(registry: Arc<Registry>, id: u64) -> Self {
        StreamHandle { registry, id }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Asks for a bookmark reaching at least `at_least` (0 for "the current broadcast point").
    pub fn owe_bookmark(&self, at_least: u64) {
        self.registry.owe_bookmark(self.id, at_least);
    }
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        self.registry.remove(self.id);
    }
}
