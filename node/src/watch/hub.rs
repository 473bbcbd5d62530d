//! The watch hub: one per member. It reads each newly applied revision's events from the store
//! once and offers them to every synced watcher through that watcher's bounded buffer; watchers that
//! start in the past catch up from history first (`catch_up.rs`) and then join.
//!
//! Ordering argument. Everything a watcher receives goes through one channel, and everything the
//! hub puts in a synced watcher's channel is put there under the hub's lock, in revision order:
//! events of revision R for every synced watcher, then `broadcast_through = R`, then owed
//! bookmarks with revision `max(broadcast_through, deliver_from - 1)`. So a bookmark never
//! overtakes an event at or below its revision (etcd issue 15220), and a bookmark owed to a watcher
//! still catching up is sent the moment it joins (etcd issue 17507).
//!
//! Hand-over argument. A catching-up watcher joins under the lock: it reads the revisions it still
//! misses up to `broadcast_through` while the lock holds `broadcast_through` still, enqueues them,
//! and sets `deliver_from = broadcast_through + 1`. The hub offers a revision only to watchers with
//! `deliver_from <= revision`, so no revision is missed or sent twice.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use revkv_storage::{
    validate_range, Error as StorageError, Event, EventBatch, MvccStore, RangeRequest,
};
use tokio::sync::{mpsc, watch, Semaphore};

use super::feed::RevisionFeed;
use super::filter::EventFilter;
use super::limits::WatchLimits;
use super::message::{CancelReason, Cancellation, RevisionEvents, WatchMessage};
use super::stream::{Ending, Watch};
use super::WatchRequest;
use crate::error::NodeError;

/// The member's watch hub.
pub struct WatchHub {
    pub(super) store: Arc<MvccStore>,
    pub(super) limits: WatchLimits,
    state: Mutex<HubState>,
    next_watch_id: AtomicU64,
    /// Bounds how many catching-up watchers read history at once, so a crowd of resuming clients
    /// cannot starve the apply path of disk and CPU.
    pub(super) catch_up_reads: Semaphore,
    stop: watch::Sender<bool>,
}

struct HubState {
    /// Every revision at or below this has been offered to every synced watcher.
    broadcast_through: u64,
    watchers: HashMap<u64, Watcher>,
    /// How many synced watchers want `prev_kv`; the hub reads prev_kv only when some do.
    synced_with_prev_kv: usize,
    /// Watchers owed a bookmark, so serving them does not scan every watcher.
    owed_bookmarks: HashSet<u64>,
    stopped: bool,
}

/// The hub's side of one watch.
struct Watcher {
    filter: EventFilter,
    prev_kv: bool,
    sender: mpsc::Sender<WatchMessage>,
    ending: Arc<Ending>,
    /// True once the watcher receives live events from the hub.
    synced: bool,
    /// The first revision this watcher has not yet been given (nor skipped as not matching).
    deliver_from: u64,
    /// A bookmark owed to this watcher must reach at least this revision.
    bookmark_owed: Option<u64>,
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

impl WatchHub {
    /// Starts the hub over `store`, woken by `feed` whenever the applied revision moves.
    pub fn start(
        store: Arc<MvccStore>,
        feed: impl RevisionFeed,
        limits: WatchLimits,
    ) -> Result<Arc<WatchHub>, NodeError> {
        limits.check().map_err(NodeError::Invalid)?;
        let current = store.current_revision()?;
        let hub = Arc::new(WatchHub {
            store,
            catch_up_reads: Semaphore::new(limits.concurrent_catch_up_reads),
            limits,
            state: Mutex::new(HubState {
                broadcast_through: current,
                watchers: HashMap::new(),
                synced_with_prev_kv: 0,
                owed_bookmarks: HashSet::new(),
                stopped: false,
            }),
            next_watch_id: AtomicU64::new(1),
            stop: watch::Sender::new(false),
        });
        tokio::spawn(hub.clone().broadcast_loop(feed));
        Ok(hub)
    }

    /// The limits this hub enforces.
    pub fn limits(&self) -> &WatchLimits {
        &self.limits
    }

    /// The revision through which the hub has offered every event to synced watchers.
    pub fn broadcast_revision(&self) -> u64 {
        self.lock().broadcast_through
    }

    /// How many watches are open on this member.
    pub fn watcher_count(&self) -> usize {
        self.lock().watchers.len()
    }

    /// Opens a watch. Answers `compacted` when `start_revision` is at or below the compact
    /// revision, and `unavailable` when the member is stopping or has its maximum of watches.
    pub fn open(self: &Arc<Self>, request: WatchRequest) -> Result<Watch, NodeError> {
        // The key rules of reads (size, order of the range ends) apply to watches too.
        let range = RangeRequest::of(request.filter.range.clone());
        validate_range(&range, self.store.limits())?;
        let current = self.store.current_revision()?;
        let compact_revision = self.store.compact_revision()?;
        let start = match request.start_revision {
            Some(revision) if revision > 0 => revision,
            _ => current + 1,
        };
        if start <= compact_revision {
            return Err(StorageError::Compacted {
                requested: start,
                compact_revision,
            }
            .into());
        }
        let progress_interval = self.limits.progress_interval(request.progress_interval)?;
        let (sender, receiver) = mpsc::channel(self.limits.stream_buffer_messages);
        let ending = Arc::new(Ending::default());
        let id = self.next_watch_id.fetch_add(1, Ordering::Relaxed);
        let needs_catch_up = self.register(id, &request, start, sender.clone(), &ending)?;
        if needs_catch_up {
            let catch_up = super::catch_up::CatchUp {
                hub: self.clone(),
                watch_id: id,
                sender,
                filter: request.filter,
                prev_kv: request.prev_kv,
                position: start,
            };
            tokio::spawn(catch_up.run());
        }
        let created = WatchMessage::Created {
            watch_id: id,
            revision: current,
        };
        Ok(Watch::new(
            id,
            self.clone(),
            receiver,
            ending,
            created,
            start,
            progress_interval,
        ))
    }

    /// Adds a watcher; answers whether it must catch up from history before it can join.
    fn register(
        &self,
        id: u64,
        request: &WatchRequest,
        start: u64,
        sender: mpsc::Sender<WatchMessage>,
        ending: &Arc<Ending>,
    ) -> Result<bool, NodeError> {
        let mut state = self.lock();
        if state.stopped {
            return Err(NodeError::Unavailable {
                reason: "the member is stopping".into(),
                retry_after: std::time::Duration::from_secs(1),
            });
        }
        if state.watchers.len() >= self.limits.max_watchers {
            return Err(NodeError::Unavailable {
                reason: format!(
                    "this member already serves its maximum of {} watches",
                    self.limits.max_watchers
                ),
                retry_after: std::time::Duration::from_secs(1),
            });
        }
        // A watch starting after everything broadcast so far has no history to read: it is synced
        // from the start, and the hub skips revisions below its start.
        let synced = start > state.broadcast_through;
        state.synced_with_prev_kv += usize::from(synced && request.prev_kv);
        let watcher = Watcher {
            filter: request.filter.clone(),
            prev_kv: request.prev_kv,
            sender,
            ending: ending.clone(),
            synced,
            deliver_from: start,
            bookmark_owed: None,
        };
        state.watchers.insert(id, watcher);
        Ok(!synced)
    }

    /// Asks for a bookmark on watch `id` whose revision is at least the member's current revision:
    /// the contract's `POST /v1/watch/{id}/progress`. Answers the revision it will reach at least.
    pub fn request_progress(&self, id: u64) -> Result<u64, NodeError> {
        let current = self.store.current_revision()?;
        if self.owe_bookmark(id, current) {
            Ok(current)
        } else {
            Err(NodeError::NotFound(format!("no watch {id} on this member")))
        }
    }

    /// Records that watch `id` is owed a bookmark reaching at least `at_least`, and sends it now
    /// if the watcher is synced and the hub has got that far. False when there is no such watch.
    pub(super) fn owe_bookmark(&self, id: u64, at_least: u64) -> bool {
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
        Self::serve_owed_bookmarks(&mut state, Some(id));
        true
    }

    /// Forgets a watch whose reader went away.
    pub(super) fn remove(&self, id: u64) {
        let mut state = self.lock();
        Self::drop_watcher(&mut state, id);
    }

    /// Ends every watch with `CANCELED member_stopping` (each stream first drains what it already
    /// holds) and refuses new ones. Called before the client listener closes.
    pub fn shutdown(&self) {
        let mut state = self.lock();
        state.stopped = true;
        let ids: Vec<u64> = state.watchers.keys().copied().collect();
        for id in ids {
            Self::cancel(&mut state, id, CancelReason::MemberStopping, None);
        }
        self.stop.send_replace(true);
    }

    /// Ends watch `id` with `reason`: records why, then drops the hub's sender so the stream ends
    /// after the messages already in its buffer.
    pub(super) fn cancel_watch(
        &self,
        id: u64,
        reason: CancelReason,
        compact_revision: Option<u64>,
    ) {
        let mut state = self.lock();
        Self::cancel(&mut state, id, reason, compact_revision);
    }

    fn cancel(state: &mut HubState, id: u64, reason: CancelReason, compact_revision: Option<u64>) {
        let broadcast_through = state.broadcast_through;
        let Some(watcher) = state.watchers.get(&id) else {
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
        Self::drop_watcher(state, id);
    }

    fn drop_watcher(state: &mut HubState, id: u64) {
        if let Some(watcher) = state.watchers.remove(&id) {
            state.synced_with_prev_kv -= usize::from(watcher.synced && watcher.prev_kv);
            state.owed_bookmarks.remove(&id);
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        // A panic while holding the lock leaves plain bookkeeping behind, never a half-sent
        // message, so the state is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Follows the applied revision until the hub stops or the feed ends.
    async fn broadcast_loop(self: Arc<Self>, mut feed: impl RevisionFeed) {
        let mut stop = self.stop.subscribe();
        let mut applied = feed.current();
        loop {
            while self.lock().broadcast_through < applied && !*stop.borrow() {
                self.broadcast_round().await;
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
    async fn broadcast_round(&self) {
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
            })) => return self.fall_behind_compaction(compact_revision),
            Ok(Err(error)) => return self.fail_synced_watchers(&error.to_string()),
            Err(join_error) => return self.fail_synced_watchers(&join_error.to_string()),
        };
        let mut state = self.lock();
        assert_eq!(
            state.broadcast_through + 1,
            from,
            "only the broadcast loop moves the broadcast point"
        );
        if !with_prev_kv && state.synced_with_prev_kv > 0 {
            // A watcher wanting prev_kv joined while the batch was read without it: read again.
            return;
        }
        Self::offer_batch(&mut state, batch);
    }

    fn offer_batch(state: &mut HubState, batch: EventBatch) {
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
    fn offer_revision(state: &mut HubState, revision: u64, events: &Arc<Vec<Event>>) {
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

    /// Cancels a watcher that has everything below its `deliver_from` and nothing after.
    fn cancel_behind(
        state: &mut HubState,
        id: u64,
        reason: CancelReason,
        compact_revision: Option<u64>,
    ) {
        if let Some(watcher) = state.watchers.get(&id) {
            watcher.ending.set(Cancellation {
                reason,
                compact_revision,
                last_revision: Some(watcher.deliver_from - 1),
            });
        }
        Self::drop_watcher(state, id);
    }

    /// Sends the bookmarks that are due: to `only` if given, else to every watcher owed one.
    fn serve_owed_bookmarks(state: &mut HubState, only: Option<u64>) {
        let candidates: Vec<u64> = match only {
            Some(id) => vec![id],
            None => state.owed_bookmarks.iter().copied().collect(),
        };
        let broadcast_through = state.broadcast_through;
        let mut overflowing = Vec::new();
        for id in candidates {
            let Some(watcher) = state.watchers.get_mut(&id) else {
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
            state.owed_bookmarks.remove(&id);
            if watcher
                .sender
                .try_send(WatchMessage::Bookmark { revision })
                .is_err()
            {
                overflowing.push(id);
            }
        }
        for id in overflowing {
            Self::cancel_behind(state, id, CancelReason::SlowConsumer, None);
        }
    }

    /// The hub's next revision was compacted away (a snapshot install or a compaction raced
    /// ahead of it): every synced watcher that still needed a compacted revision is canceled with
    /// the compact revision, and the hub continues after it.
    fn fall_behind_compaction(&self, compact_revision: u64) {
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
    fn fail_synced_watchers(&self, error: &str) {
        tracing::error!(error, "watch hub could not read the history");
        let mut state = self.lock();
        for id in synced_ids(&state) {
            Self::cancel_behind(&mut state, id, CancelReason::Internal, None);
        }
    }

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
    fn read_range(
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

fn synced_ids(state: &HubState) -> Vec<u64> {
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
