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
//! The rest of the hub lives beside this file: `broadcast.rs` (the loop that reads and offers each
//! revision) and `hand_over.rs` (how a catching-up watch joins).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use revkv_metrics::{WatchMetrics, WatcherGuard};
use revkv_storage::{validate_range, Error as StorageError, MvccStore, RangeRequest};
use tokio::sync::{mpsc, watch, Semaphore};

use super::feed::RevisionFeed;
use super::filter::EventFilter;
use super::limits::WatchLimits;
use super::message::{CancelReason, Cancellation, WatchMessage};
use super::stream::{Ending, Watch};
use super::WatchRequest;
use crate::error::NodeError;

/// The member's watch hub.
pub struct WatchHub {
    pub(super) store: Arc<MvccStore>,
    pub(super) limits: WatchLimits,
    pub(super) state: Mutex<HubState>,
    next_watch_id: AtomicU64,
    /// Bounds how many catching-up watchers read history at once, so a crowd of resuming clients
    /// cannot starve the apply path of disk and CPU.
    pub(super) catch_up_reads: Semaphore,
    pub(super) stop: watch::Sender<bool>,
    /// The member's watch metrics (none for a hub outside a member, as in tests).
    pub(super) metrics: Option<WatchMetrics>,
}

pub(super) struct HubState {
    /// Every revision at or below this has been offered to every synced watcher.
    pub(super) broadcast_through: u64,
    pub(super) watchers: HashMap<u64, Watcher>,
    /// How many synced watchers want `prev_kv`; the hub reads prev_kv only when some do.
    pub(super) synced_with_prev_kv: usize,
    /// Watchers owed a bookmark, so serving them does not scan every watcher.
    pub(super) owed_bookmarks: HashSet<u64>,
    pub(super) stopped: bool,
}

/// The hub's side of one watch.
pub(super) struct Watcher {
    pub(super) filter: EventFilter,
    pub(super) prev_kv: bool,
    pub(super) sender: mpsc::Sender<WatchMessage>,
    pub(super) ending: Arc<Ending>,
    /// True once the watcher receives live events from the hub.
    pub(super) synced: bool,
    /// The first revision this watcher has not yet been given (nor skipped as not matching).
    pub(super) deliver_from: u64,
    /// A bookmark owed to this watcher must reach at least this revision.
    pub(super) bookmark_owed: Option<u64>,
    /// Counts this watcher in the open-watchers gauge until it leaves the hub.
    pub(super) _counted: Option<WatcherGuard>,
}

impl WatchHub {
    /// Starts the hub over `store`, woken by `feed` whenever the applied revision moves.
    pub fn start(
        store: Arc<MvccStore>,
        feed: impl RevisionFeed,
        limits: WatchLimits,
        metrics: Option<WatchMetrics>,
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
            metrics,
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
                retry_after: Duration::from_secs(1),
            });
        }
        if state.watchers.len() >= self.limits.max_watchers {
            return Err(NodeError::Unavailable {
                reason: format!(
                    "this member already serves its maximum of {} watches",
                    self.limits.max_watchers
                ),
                retry_after: Duration::from_secs(1),
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
            _counted: self.metrics.as_ref().map(WatchMetrics::track_watcher),
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

    pub(super) fn cancel(
        state: &mut HubState,
        id: u64,
        reason: CancelReason,
        compact_revision: Option<u64>,
    ) {
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

    pub(super) fn drop_watcher(state: &mut HubState, id: u64) {
        if let Some(watcher) = state.watchers.remove(&id) {
            state.synced_with_prev_kv -= usize::from(watcher.synced && watcher.prev_kv);
            state.owed_bookmarks.remove(&id);
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, HubState> {
        // A panic while holding the lock leaves plain bookkeeping behind, never a half-sent
        // message, so the state is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Cancels a watcher that has everything below its `deliver_from` and nothing after.
    pub(super) fn cancel_behind(
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
    pub(super) fn serve_owed_bookmarks(state: &mut HubState, only: Option<u64>) {
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
}
